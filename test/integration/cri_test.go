package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// TestCRI: the path the kubelet takes. containerd's CRI plugin, with a
// runtime handler "slopbox" whose BinaryName is slopbox-runc, runs a pod
// sandbox and a container in it; exec, stop and remove; nothing left.
// The client is the CRI's own Go API (k8s.io/cri-api over gRPC), the calls
// crictl's runp, create, start, exec, stop, rm and rmp make.
func TestCRI(t *testing.T) {
	o := newOCI(t)
	reg := fixtures.Registry(t, nil)
	pause := reg + "/cri/pause:latest"
	pauseImg, err := mutate.Config(fixtures.Busybox(t, image.HostPlatform()), v1.Config{Cmd: []string{"/bin/sleep", "1000000"}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Push(t, pause, pauseImg)
	ref := reg + "/cri/busybox:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))

	c := startContainerd(t, func(dir string) string {
		for _, d := range []string{"cni-bin", "cni-conf"} {
			os.MkdirAll(filepath.Join(dir, d), 0o755)
		}
		return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # CAP_SYS_RESOURCE is not in these machines' bounding set: the pause
  # container's oom_score_adj -998 is clamped to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors.%q]
    endpoint = ["http://%s"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "slopbox"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.slopbox]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.slopbox.options]
      BinaryName = %q
      Root = %q
`, pause, filepath.Join(dir, "cni-bin"), filepath.Join(dir, "cni-conf"), reg, reg, o.bin, o.root)
	})
	sock := c.sock

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var conn *grpc.ClientConn
	var rt cri.RuntimeServiceClient
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		conn, err = grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			rt = cri.NewRuntimeServiceClient(conn)
			if _, err = rt.Version(ctx, &cri.VersionRequest{}); err == nil {
				break
			}
			conn.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd's CRI did not come up: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer conn.Close()
	img := cri.NewImageServiceClient(conn)

	// runp: a pod on the host's network (no CNI here), run by slopbox.
	podCfg := &cri.PodSandboxConfig{
		Metadata: &cri.PodSandboxMetadata{Name: "eval", Namespace: "default", Uid: fmt.Sprintf("uid-%d", os.Getpid())},
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
		}},
	}
	pod, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "slopbox"})
	if err != nil {
		t.Fatalf("runp: %v", err)
	}
	if _, err := img.PullImage(ctx, &cri.PullImageRequest{Image: &cri.ImageSpec{Image: ref}}); err != nil {
		t.Fatalf("pull: %v", err)
	}
	ctr, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId: pod.PodSandboxId, SandboxConfig: podCfg,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "task"},
			Image:    &cri.ImageSpec{Image: ref},
			Command:  []string{"sleep", "1000"},
		},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("start: %v", err)
	}
	ex, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: ctr.ContainerId, Cmd: []string{"sh", "-c", "echo from $(id -u); exit 5"}, Timeout: 30})
	if err != nil || ex.ExitCode != 5 || string(ex.Stdout) != "from 0\n" {
		t.Errorf("exec: %v %+v", err, ex)
	}
	// The pod's containers are slopbox's: its state directory has them.
	if states, _ := filepath.Glob(filepath.Join(o.root, "*", "*", "state.json")); len(states) != 2 {
		t.Errorf("slopbox-runc's state holds %v, want the pod sandbox and the container", states)
	}
	if _, err := rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ctr.ContainerId, Timeout: 2}); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Errorf("rm: %v", err)
	}
	if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Errorf("stopp: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Errorf("rmp: %v", err)
	}
	if l, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{}); err != nil || len(l.Items) != 0 {
		t.Errorf("pods left: %v %v", err, l)
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 1000").Output(); len(out) > 0 {
		t.Errorf("processes left: %s", out)
	}
}
