package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// TestCRI: the path the kubelet takes. containerd's CRI plugin, with a
// runtime handler "slopbox" whose BinaryName is slopbox-runc, runs a pod
// sandbox and a container in it; exec, stop and remove; nothing left.
// The client is crictl, built from the module test/crictl pins: runp,
// pull, create, start, exec (ExecSync and the streamed exec), update (the
// kubelet's UpdateContainerResources), stop, rm, stopp and rmp.
func TestCRI(t *testing.T) {
	o := newOCI(t)
	reg := fixtures.Registry(t, nil)
	pause := reg + "/cri/pause:latest"
	pauseImg, err := mutate.Config(fixtures.Busybox(t, image.HostPlatform()), v1.Config{Cmd: []string{"/bin/sleep", "1000033"}, Env: []string{"PATH=/usr/bin:/bin"}})
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
	crictl := buildCrictl(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "crictl.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", c.sock, c.sock)), 0o644)
	// run returns crictl's stdout, or its stderr if it failed; errOut
	// both.
	var errOut string
	run := func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, crictl, append([]string{"--config", config}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if ctx.Err() != nil {
			t.Fatalf("crictl %v hung: %s %s", args, out, stderr.String())
		}
		code := 0
		errOut = stderr.String()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
			if len(out) == 0 {
				out = []byte(stderr.String())
			}
		} else if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out)), code
	}
	// A failure half-way leaves nothing either: pods go before containerd.
	t.Cleanup(func() { run("rmp", "--force", "--all") })
	fixtures.Eventually(t, "containerd's CRI up", func() (bool, string) {
		out, code := run("version")
		return code == 0, out
	})

	// runp: a pod on the host's network (no CNI here), run by slopbox.
	podCfg := filepath.Join(dir, "pod.json")
	os.WriteFile(podCfg, []byte(fmt.Sprintf(`{"metadata": {"name": "eval", "namespace": "default", "uid": "uid-%d"},
 "linux": {"security_context": {"namespace_options": {"network": 2}}}}`, os.Getpid())), 0o644)
	ctrCfg := filepath.Join(dir, "ctr.json")
	os.WriteFile(ctrCfg, []byte(fmt.Sprintf(`{"metadata": {"name": "task"}, "image": {"image": %q}, "command": ["sleep", "1733"]}`, ref)), 0o644)
	pod, code := run("runp", "--runtime", "slopbox", podCfg)
	if code != 0 {
		t.Fatalf("crictl runp: %s", pod)
	}
	if out, code := run("pull", ref); code != 0 {
		t.Fatalf("crictl pull: %s", out)
	}
	ctr, code := run("create", pod, ctrCfg, podCfg)
	if code != 0 {
		t.Fatalf("crictl create: %s", ctr)
	}
	if out, code := run("start", ctr); code != 0 {
		t.Fatalf("crictl start: %s", out)
	}
	// crictl exits 1 on a command's non-zero exit and names its code.
	if out, code := run("exec", "--sync", ctr, "sh", "-c", "echo from $(id -u)"); code != 0 || out != "from 0" {
		t.Errorf("crictl exec --sync: %d %q", code, out)
	}
	if out, code := run("exec", "--sync", ctr, "sh", "-c", "exit 5"); code != 1 || !strings.Contains(out, "exited with 5") {
		t.Errorf("crictl exec --sync of exit 5: %d %q", code, out)
	}
	if out, code := run("exec", ctr, "sh", "-c", "echo streamed; exit 3"); code != 1 || out != "streamed" || !strings.Contains(errOut, "exit code 3") {
		t.Errorf("crictl exec (streamed) of exit 3: %d %q %q", code, out, errOut)
	}
	// The pod's containers are slopbox's: its state directory has them.
	if states, _ := filepath.Glob(filepath.Join(o.root, "*", "*", "state.json")); len(states) != 2 {
		t.Errorf("slopbox-runc's state holds %v, want the pod sandbox and the container", states)
	}
	// The kubelet's UpdateContainerResources: containerd's shim runs
	// slopbox-runc update --resources -.
	if out, code := run("update", "--memory", "67108864", ctr); code != 0 {
		t.Errorf("crictl update --memory: %s", out)
	} else {
		full, _ := run("inspect", "--output", "go-template", "--template", "{{.status.id}}", ctr)
		ev, stderr, code := o.run("--root", filepath.Join(o.root, "k8s.io"), "events", "--stats", full)
		if code != 0 || !strings.Contains(ev, `"limit":67108864`) {
			t.Errorf("after crictl update --memory 64 MiB, slopbox-runc events --stats: %d %s %s", code, ev, stderr)
		}
	}
	for _, step := range [][]string{{"stop", "--timeout", "2", ctr}, {"rm", ctr}, {"stopp", pod}, {"rmp", pod}} {
		if out, code := run(step...); code != 0 {
			t.Errorf("crictl %s: %s", step[0], out)
		}
	}
	if out, code := run("pods", "-q"); code != 0 || out != "" {
		t.Errorf("pods left: %d %q", code, out)
	}
	// The pod's processes, by command lines only this test uses (other
	// tests and other users run their own sleeps on this host); the
	// kernel may take a moment to release them after the removal.
	fixtures.Eventually(t, "the pod's processes gone", func() (bool, string) {
		out, _ := exec.Command("pgrep", "-a", "-xf", "(/bin/)?sleep (1733|1000033)").Output()
		return len(out) == 0, "left: " + string(out)
	})
}

// buildCrictl builds crictl from the module test/crictl pins.
func buildCrictl(t *testing.T) string {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building crictl needs the go command: %v", err)
	}
	mod, _ := filepath.Abs("../crictl")
	bin := filepath.Join(t.TempDir(), "crictl")
	build := exec.Command(gobin, "build", "-o", bin, "sigs.k8s.io/cri-tools/cmd/crictl")
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building crictl: %v\n%s", err, out)
	}
	return bin
}
