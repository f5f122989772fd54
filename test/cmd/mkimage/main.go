// Command mkimage builds an image from directories (one layer each, oldest
// first) and pushes it to a registry or writes an OCI layout. The demo and
// the benchmarks use it to make images from Debian packages offline.
//
//	mkimage -ref 127.0.0.1:5055/demo/python:3 -cmd python3 rootfs-base rootfs-python
//	mkimage -layout out/ -ref demo/busybox:latest rootfs
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	ref := flag.String("ref", "", "image name (pushed unless -layout is given)")
	out := flag.String("layout", "", "write an OCI layout here instead of pushing")
	cmd := flag.String("cmd", "sh", "default command (space-separated)")
	workdir := flag.String("workdir", "", "default working directory")
	flag.Parse()
	if *ref == "" || flag.NArg() == 0 {
		log.Fatal("usage: mkimage -ref NAME [-layout DIR] [-cmd CMD] DIR...")
	}
	var layers []v1.Layer
	for _, dir := range flag.Args() {
		b, err := tarDir(dir)
		if err != nil {
			log.Fatalf("layer %s: %v", dir, err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			log.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		log.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		log.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Now().UTC()}
	cf.Config.Cmd = strings.Fields(*cmd)
	cf.Config.WorkingDir = *workdir
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		log.Fatal(err)
	}
	r, err := name.ParseReference(*ref)
	if err != nil {
		log.Fatal(err)
	}
	if *out != "" {
		p, err := layout.FromPath(*out)
		if err != nil {
			if p, err = layout.Write(*out, empty.Index); err != nil {
				log.Fatal(err)
			}
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": r.Name()})); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := remote.Write(r, img); err != nil {
		log.Fatalf("push %s: %v", r, err)
	}
	d, _ := img.Digest()
	fmt.Printf("pushed %s@%s\n", r, d)
}

// tarDir renders dir as an uncompressed layer tar, keeping owners, modes,
// symlinks and hardlinks.
func tarDir(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // sockets and the like are not image content
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		st := fi.Sys().(*syscall.Stat_t)
		h.Uid, h.Gid, h.Uname, h.Gname = int(st.Uid), int(st.Gid), "", ""
		h.Format = tar.FormatPAX
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := inodes[st.Ino]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				inodes[st.Ino] = rel
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), tw.Close()
}
