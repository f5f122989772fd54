package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/sandbox"
)

// A harness written in Go: pull an image, spawn a sandbox over a workspace,
// run a command through the setup script, read the result, clean up. (The
// program's main must call sandbox.Init first, and the binary must be linked
// statically; see the package documentation.)
func Example() {
	ctx := context.Background()
	ref := serveBusybox() // an image holding Debian's static busybox, served locally

	dir, _ := os.MkdirTemp("", "slopbox-example-")
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	workspace := filepath.Join(dir, "ws")
	os.Mkdir(workspace, 0o755)

	b, err := sandbox.New(filepath.Join(dir, "store"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // stops the sandboxes the Backend keeps ready for the next Spawn
	if _, err := b.Store().Pull(ctx, ref); err != nil {
		log.Fatal(err)
	}
	sb, err := b.Spawn(ctx, backend.SpawnSpec{
		Image:     ref,
		Workspace: workspace,
		Env:       map[string]string{"GREETING": "hello"},
		Setup:     backend.Setup{Commands: []string{"echo preparing"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Cleanup()

	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo $GREETING from $(pwd) > out.txt; cat out.txt"})
	if err != nil {
		log.Fatal(err)
	}
	host, _ := os.ReadFile(filepath.Join(workspace, "out.txt"))
	fmt.Printf("exit %d, setup said %q\n", res.ExitCode, strings.TrimSpace(res.SetupStdout))
	fmt.Printf("stdout %q\n", res.Stdout)
	fmt.Printf("on the host: %s", host)
	// Output:
	// exit 0, setup said "preparing"
	// stdout "\n\nhello from /workspace\n"
	// on the host: hello from /workspace
}

func serveBusybox() string {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		log.Fatal("the example needs Debian's busybox-static: ", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	for _, applet := range []string{"sh", "echo", "cat", "pwd"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777})
	tw.Close()
	layer, _ := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	img, _ := mutate.AppendLayers(empty.Image, layer)
	cf, _ := img.ConfigFile()
	cf.OS, cf.Architecture = "linux", runtimeArch()
	img, _ = mutate.ConfigFile(img, cf)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	ref := strings.TrimPrefix(srv.URL, "http://") + "/example/busybox:latest"
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		log.Fatal(err)
	}
	return ref
}

func runtimeArch() string { return runtime.GOARCH }
