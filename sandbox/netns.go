package sandbox

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/backend"
)

// Bridge networking: the sandbox has its own network namespace (as with
// none) and slirp4netns, started for it once its PID 1 runs, gives it a
// tap device with an address, a default route and a DNS forwarder, and
// makes its outbound connections from the host's namespace as the user
// (rootless; the same as root). Connections to the host's loopback, which
// slirp4netns offers on the gateway's address, are refused unless asked
// for (AllowHostLoopback).
const (
	netHelperFile = "nethelper.pid" // "pid start-time" of slirp4netns
	netHelperLog  = "nethelper.log"
	bridgeTap     = "tap0"
	bridgeMTU     = 65520
)

// The addresses slirp4netns gives (its default 10.0.2.0/24).
var (
	bridgeIP      = netip.MustParseAddr("10.0.2.100")
	bridgeGateway = netip.MustParseAddr("10.0.2.2")
	bridgeDNS     = netip.MustParseAddr("10.0.2.3")
)

// ErrNoNetHelper is wrapped when bridge networking cannot be set up on
// this host.
var ErrNoNetHelper = errdefs.ErrUnavailable.WithMessage("bridge networking is not available")

// netHelper returns slirp4netns's path, or why bridge networking cannot
// work for this user.
func netHelper() (string, error) {
	p, err := exec.LookPath("slirp4netns")
	if err != nil {
		return "", fmt.Errorf("%w: slirp4netns is not installed (apt-get install slirp4netns); use --network none or host", ErrNoNetHelper)
	}
	if os.Geteuid() != 0 {
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/net/tun", &st); err != nil {
			return "", fmt.Errorf("%w: /dev/net/tun is missing (modprobe tun)", ErrNoNetHelper)
		}
		if st.Mode&0o006 != 0o006 {
			return "", fmt.Errorf("%w: /dev/net/tun is mode %#o, so slirp4netns cannot open it as this user; as root: chmod 0666 /dev/net/tun (as most distributions ship it); `slopbox doctor` checks it", ErrNoNetHelper, st.Mode&0o777)
		}
	}
	return p, nil
}

// startNetHelper starts wiring the network namespace of PID 1 pid up for
// rec and records the helper in rec's directory; the returned wait blocks
// until the interface is configured (the caller claims the sandbox
// meanwhile: slirp4netns needs only the namespace, which PID 1 holds).
func (b *Backend) startNetHelper(rec *record, pid int) (wait func() error, err error) {
	bin, err := netHelper()
	if err != nil {
		return nil, err
	}
	dir := b.state.sandboxDir(rec.ID)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := []string{"--configure", fmt.Sprintf("--mtu=%d", bridgeMTU), "--ready-fd=3", "--enable-seccomp", "--netns-type=path"}
	if os.Geteuid() == 0 {
		// Its own mount namespace, capabilities dropped. Rootless,
		// slirp4netns 1.2 fails to set it up from a process that started
		// the sandbox ("setegid(0)"); it runs as the user anyway.
		args = append(args, "--enable-sandbox")
	}
	if !rec.AllowHostLoopback {
		args = append(args, "--disable-host-loopback")
	}
	if os.Geteuid() != 0 {
		args = append(args, fmt.Sprintf("--userns-path=/proc/%d/ns/user", pid))
	}
	args = append(args, fmt.Sprintf("/proc/%d/ns/net", pid), bridgeTap)
	// Its messages go to a file: it outlives the slopbox process that
	// started it, so a pipe to that process would break.
	logPath := filepath.Join(dir, netHelperLog)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		readyR.Close()
		readyW.Close()
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), helperMarker+rec.ID)
	// Its own session: it outlives a CLI that started it, and is killed
	// with the sandbox (stop, rm, prune), by the pid recorded here.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		readyR.Close()
		return nil, fmt.Errorf("start slirp4netns: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	if st, _, ok := procStart(cmd.Process.Pid); ok {
		writePidFile(filepath.Join(dir, netHelperFile), cmd.Process.Pid, st)
	}
	ready := make(chan error, 1)
	go func() {
		defer readyR.Close()
		var buf [1]byte
		_, err := readyR.Read(buf[:])
		ready <- err
	}()
	return func() error {
		select {
		case err := <-ready:
			if err == nil {
				return nil
			}
		case <-time.After(10 * time.Second):
		case <-exited:
		}
		cmd.Process.Kill()
		<-exited
		os.Remove(filepath.Join(dir, netHelperFile))
		msg, _ := os.ReadFile(logPath)
		if len(msg) > 2048 {
			msg = msg[:2048]
		}
		return fmt.Errorf("slirp4netns did not set up the sandbox's network: %s (its log: %s)", strings.TrimSpace(string(msg)), logPath)
	}, nil
}

// killHelpers stops the sandbox's host-side helpers, slirp4netns and the
// port forwarder: by their environment marker, so also one that a slopbox
// killed before it recorded the pid started. slirp4netns is not waited
// for (closing its tap device takes it 10-20 ms, and nothing it holds
// matters to the caller); the forwarder is, so that its host ports are
// free when this returns.
func killHelpers(rec *record, dir string) error {
	if rec.Network != backend.NetworkBridge && len(rec.Ports) == 0 {
		return nil
	}
	// By the pids recorded, as a rule; by the marker (a scan of every
	// process's environment, milliseconds) when one is not: a helper whose
	// starter was killed before it wrote the pid, or none to record.
	_, err := os.Lstat(filepath.Join(dir, portsFile))
	if !signalRecorded(dir, netHelperFile) || len(rec.Ports) > 0 && err != nil {
		killMarked(helperMarker + rec.ID)
	}
	os.Remove(filepath.Join(dir, netHelperFile))
	return killPorts(dir)
}

// bridgeAddrs are the sandbox's own address and its DNS server in rec's
// network mode (none: invalid).
func bridgeAddrs(rec *record) (own, dns netip.Addr) {
	if len(rec.Nets) > 0 {
		// The first network's DNS server, on its gateway: it answers the
		// names of every network the sandbox is on and forwards the rest.
		// Its own address there, once attached (/etc/hosts names it, as
		// Docker's does).
		if ep := rec.Nets[0].Endpoint; ep != nil {
			own = ep.IPAddress
		}
		return own, rec.Nets[0].Gateway
	}
	if rec.Network == backend.NetworkBridge {
		return bridgeIP, bridgeDNS
	}
	return netip.Addr{}, netip.Addr{}
}

// hostGateway is where the sandbox reaches the host ("host-gateway" in
// --add-host): with the host's network its loopback; otherwise the bridge
// gateway, which leads to the host's loopback only with
// AllowHostLoopback (and nowhere in none, as Docker's docker0 address is
// unreachable from a --network none container).
func hostGateway(rec *record) netip.Addr {
	if rec.Network == backend.NetworkHost {
		return netip.MustParseAddr("127.0.0.1")
	}
	return bridgeGateway
}
