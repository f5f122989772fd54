package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Import makes an image of one layer from a root filesystem tarball
// (docker import): plain or gzip-compressed, with config cfg, named ref
// ("" for none). It returns the image's id. The image is written as a
// docker-save archive and loaded as Load does, so that it is checked and
// extracted the same way.
func (s *Store) Import(ctx context.Context, r io.Reader, ref string, cfg v1.Config, comment string) (string, error) {
	if ref != "" {
		if _, err := s.ParseReference(ref); err != nil {
			return "", err
		}
	}
	// The layer, uncompressed, and its digest.
	layer, err := os.CreateTemp(s.path("tmp"), fmt.Sprintf("%d-import-", os.Getpid()))
	if err != nil {
		return "", err
	}
	defer os.Remove(layer.Name())
	defer layer.Close()
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return "", fmt.Errorf("%w: import: %v", ErrBadArchive, err)
		}
		defer gz.Close()
		src = gz
	}
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(layer, h), &ctxReader{ctx: ctx, r: src})
	if err != nil {
		return "", fmt.Errorf("import: reading the tarball: %w", err)
	}
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	now := time.Now().UTC()
	config, err := json.Marshal(v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux", Created: v1.Time{Time: now}, Config: cfg,
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
		History: []v1.History{{Created: v1.Time{Time: now}, CreatedBy: "slopbox import", Comment: comment}},
	})
	if err != nil {
		return "", err
	}
	var tags []string
	if ref != "" {
		tags = []string{ref}
	}
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": tags, "Layers": []string{"layer.tar"}}})

	archive, err := os.CreateTemp(s.path("tmp"), fmt.Sprintf("%d-import-", os.Getpid()))
	if err != nil {
		return "", err
	}
	defer os.Remove(archive.Name())
	defer archive.Close()
	tw := tar.NewWriter(archive)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"config.json", config}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.b)), ModTime: now}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.b); err != nil {
			return "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "layer.tar", Mode: 0o644, Size: size, ModTime: now}); err != nil {
		return "", err
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if _, err := io.CopyN(tw, layer, size); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := archive.Close(); err != nil {
		return "", err
	}
	if _, err := s.Load(ctx, archive.Name()); err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	sum := sha256.Sum256(config)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ApplyChanges applies Dockerfile instructions to cfg, as docker import
// --change and commit --change do: CMD, ENTRYPOINT (JSON or shell form),
// ENV, LABEL, USER, WORKDIR, EXPOSE, STOPSIGNAL.
func ApplyChanges(cfg *v1.Config, changes []string) error {
	for _, c := range changes {
		verb, arg, _ := strings.Cut(strings.TrimSpace(c), " ")
		arg = strings.TrimSpace(arg)
		bad := func(why string) error {
			return fmt.Errorf("change %q: %s", c, why)
		}
		command := func() []string {
			var list []string
			if json.Unmarshal([]byte(arg), &list) == nil {
				return list
			}
			return []string{"/bin/sh", "-c", arg}
		}
		pairs := func() (map[string]string, error) {
			out := map[string]string{}
			if k, _, ok := strings.Cut(arg, "="); !ok || strings.ContainsAny(k, " \t") {
				// The old form: KEY VALUE.
				k, v, ok := strings.Cut(arg, " ")
				if !ok || k == "" {
					return nil, bad("want KEY=VALUE")
				}
				out[k] = strings.TrimSpace(v)
				return out, nil
			}
			for _, kv := range strings.Fields(arg) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return nil, bad("want KEY=VALUE")
				}
				out[k] = strings.Trim(v, `"`)
			}
			return out, nil
		}
		switch strings.ToUpper(verb) {
		case "CMD":
			cfg.Cmd = command()
		case "ENTRYPOINT":
			cfg.Entrypoint = command()
		case "USER":
			cfg.User = arg
		case "WORKDIR":
			cfg.WorkingDir = arg
		case "STOPSIGNAL":
			cfg.StopSignal = arg
		case "ENV":
			kv, err := pairs()
			if err != nil {
				return err
			}
			for k, v := range kv {
				cfg.Env = append(cfg.Env, k+"="+v)
			}
		case "LABEL":
			kv, err := pairs()
			if err != nil {
				return err
			}
			if cfg.Labels == nil {
				cfg.Labels = map[string]string{}
			}
			for k, v := range kv {
				cfg.Labels[k] = v
			}
		case "EXPOSE":
			if cfg.ExposedPorts == nil {
				cfg.ExposedPorts = map[string]struct{}{}
			}
			for _, p := range strings.Fields(arg) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				cfg.ExposedPorts[p] = struct{}{}
			}
		default:
			return bad("not a supported instruction (CMD, ENTRYPOINT, ENV, LABEL, USER, WORKDIR, EXPOSE, STOPSIGNAL)")
		}
	}
	return nil
}
