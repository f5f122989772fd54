package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// goldenJSON marshals s for comparison. The seccomp syscall list depends on
// the architecture and kernel of the machine running the test, so it is
// reduced to its default action (TestDefaultSeccomp checks the rest).
func goldenJSON(t *testing.T, s *specs.Spec) []byte {
	t.Helper()
	c := *s
	if s.Linux != nil {
		l := *s.Linux
		if l.Seccomp != nil {
			l.Seccomp = &specs.LinuxSeccomp{
				DefaultAction:   l.Seccomp.DefaultAction,
				DefaultErrnoRet: l.Seccomp.DefaultErrnoRet,
			}
		}
		c.Linux = &l
	}
	b, err := json.MarshalIndent(&c, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func checkGolden(t *testing.T, name string, s *specs.Spec) {
	t.Helper()
	got := goldenJSON(t, s)
	file := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./oci -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file (run go test ./oci -update after checking the change)\n--- got ---\n%s", file, got)
	}
}

func rootlessMaps() ([]specs.LinuxIDMapping, []specs.LinuxIDMapping) {
	uids := []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: 1000, Size: 1},
		{ContainerID: 1, HostID: 100000, Size: 65536},
	}
	gids := []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: 1000, Size: 1},
		{ContainerID: 1, HostID: 100000, Size: 65536},
	}
	return uids, gids
}

func TestGolden(t *testing.T) {
	uids, gids := rootlessMaps()
	binds, err := MountPlan{
		Workspace:      "/home/u/ws",
		MountWorkspace: true,
		Extra: []BindSource{
			{Source: "data", Target: "/data", ReadOnly: true},
			{Source: "/opt/cache", Target: "/root/.cache"},
		},
		Spawn:  []BindSource{{Source: "/srv/tools", Target: "/tools", ReadOnly: true}},
		Static: []BindSource{{Source: "/srv/assets/tests", Target: "tests/cases"}},
	}.Resolve()
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		opts []Opt
	}{
		{"default", nil},
		{"rootless_mounts", []Opt{
			WithRootfs("/var/lib/slopbox/sb1/rootfs", false),
			WithProcess([]string{"/.slopbox/init"}, []string{"HOME=/root", "LANG=C.UTF-8"}, "/workspace"),
			WithUser(1000, 1000, []uint32{1000, 27}),
			WithHostname("sb1"),
			WithIDMappings(uids, gids),
			WithMounts(binds),
		}},
		{"host_network", []Opt{
			WithIDMappings(uids, gids),
			WithNetwork(NetworkHost),
		}},
		{"no_seccomp_readonly", []Opt{
			WithRootfs("rootfs", true),
			WithoutSeccomp(),
			WithNetwork(NetworkBridge),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.name, s)
		})
	}
}

func nsTypes(s *specs.Spec) []specs.LinuxNamespaceType {
	var ts []specs.LinuxNamespaceType
	for _, n := range s.Linux.Namespaces {
		ts = append(ts, n.Type)
	}
	return ts
}

func mountAt(s *specs.Spec, dst string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestDefaults(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []specs.LinuxNamespaceType{
		specs.PIDNamespace, specs.MountNamespace, specs.IPCNamespace, specs.UTSNamespace,
		specs.NetworkNamespace, specs.UserNamespace, specs.CgroupNamespace,
	} {
		if !slices.Contains(nsTypes(s), ns) {
			t.Errorf("namespace %s missing", ns)
		}
	}
	p := s.Process
	if !p.NoNewPrivileges || p.Terminal {
		t.Errorf("noNewPrivileges=%v terminal=%v", p.NoNewPrivileges, p.Terminal)
	}
	// Docker's 14 less CAP_SETFCAP (see DefaultCapabilities).
	if len(DefaultCapabilities) != 13 || slices.Contains(DefaultCapabilities, "CAP_SETFCAP") {
		t.Errorf("want Docker's 14 default capabilities less CAP_SETFCAP, have %v", DefaultCapabilities)
	}
	c := p.Capabilities
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
		if !slices.Equal(set, DefaultCapabilities) {
			t.Errorf("%s = %v", name, set)
		}
		if slices.Contains(set, "CAP_SYS_ADMIN") || slices.Contains(set, "CAP_SYS_PTRACE") {
			t.Errorf("%s holds a dangerous capability: %v", name, set)
		}
	}
	if len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
		t.Errorf("inheritable %v ambient %v, want empty", c.Inheritable, c.Ambient)
	}
	if s.Hostname != "slopbox" {
		t.Errorf("hostname %q", s.Hostname)
	}
	if len(p.Rlimits) != 0 {
		t.Errorf("rlimits %v, want none", p.Rlimits)
	}
	for _, m := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware", "/proc/sched_debug"} {
		if !slices.Contains(s.Linux.MaskedPaths, m) {
			t.Errorf("%s not masked", m)
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sysrq-trigger") {
		t.Errorf("readonly paths %v", s.Linux.ReadonlyPaths)
	}
	pts := mountAt(s, "/dev/pts")
	if pts == nil || !slices.Contains(pts.Options, "newinstance") || !slices.Contains(pts.Options, "ptmxmode=0666") {
		t.Fatalf("/dev/pts mount %+v", pts)
	}
	for _, o := range pts.Options {
		if len(o) > 4 && o[:4] == "gid=" {
			t.Errorf("/dev/pts has %s, which fails without a mapped gid", o)
		}
	}
	sys := mountAt(s, "/sys")
	if sys == nil || sys.Type != "sysfs" || !slices.Contains(sys.Options, "ro") {
		t.Errorf("/sys mount %+v", sys)
	}
	if mountAt(s, "/run") != nil {
		t.Error("/run must be left to the image")
	}
}

func TestDefaultSeccomp(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Linux.Seccomp
	if sc == nil {
		t.Fatal("no seccomp profile")
	}
	if sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != 1 {
		t.Errorf("default action %s errno %v, want SCMP_ACT_ERRNO/EPERM", sc.DefaultAction, sc.DefaultErrnoRet)
	}
	native := map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64, "riscv64": specs.ArchRISCV64, "s390x": specs.ArchS390X}[runtime.GOARCH]
	if native != "" && !slices.Contains(sc.Architectures, native) {
		t.Errorf("architectures %v lack %s", sc.Architectures, native)
	}
	allowed := map[string]bool{}
	for _, sys := range sc.Syscalls {
		if sys.Action == specs.ActAllow && len(sys.Args) == 0 {
			for _, n := range sys.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"read", "write", "execve", "exit_group", "futex", "setuid"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed unconditionally", n)
		}
	}
	// Calls that set a file's mode are allowed only without setuid/setgid
	// bits (open and openat also when they create nothing); openat2, whose
	// mode seccomp cannot read, fails with ENOSYS.
	for n, argIdx := range map[string][]uint{"chmod": {1}, "fchmod": {1}, "fchmodat": {2}, "fchmodat2": {2}, "creat": {1},
		"mknod": {1}, "mknodat": {2}, "open": {2, 1}, "openat": {3, 2}, "openat2": nil} {
		if allowed[n] {
			t.Errorf("%s is allowed unconditionally", n)
		}
		var got []uint
		for _, sys := range sc.Syscalls {
			if !slices.Contains(sys.Names, n) || len(sys.Args) == 0 {
				continue
			}
			a := sys.Args[0]
			if sys.Action != specs.ActAllow || len(sys.Args) != 1 || a.Op != specs.OpMaskedEqual || a.ValueTwo != 0 {
				t.Errorf("%s: rule %+v", n, sys)
			}
			if a.Value != 0o6000 && a.Value != 0o20000100 {
				t.Errorf("%s: mask %#o", n, a.Value)
			}
			got = append(got, a.Index)
		}
		if !slices.Equal(got, argIdx) {
			t.Errorf("%s: conditional allow on args %v, want %v", n, got, argIdx)
		}
	}
	if i := slices.IndexFunc(sc.Syscalls, func(s specs.LinuxSyscall) bool { return slices.Contains(s.Names, "openat2") }); i < 0 ||
		sc.Syscalls[i].Action != specs.ActErrno || *sc.Syscalls[i].ErrnoRet != 38 {
		t.Errorf("openat2 must fail with ENOSYS")
	}
	// Gated on CAP_SYS_ADMIN / CAP_SYS_MODULE / CAP_SYS_BOOT, none of which we keep.
	for _, n := range []string{"mount", "umount2", "unshare", "setns", "bpf", "kexec_load", "init_module", "reboot", "open_by_handle_at", "swapon"} {
		for _, sys := range sc.Syscalls {
			if sys.Action == specs.ActAllow && slices.Contains(sys.Names, n) {
				t.Errorf("%s is allowed (args %v)", n, sys.Args)
			}
		}
	}

	off, err := New(WithoutSeccomp())
	if err != nil {
		t.Fatal(err)
	}
	if off.Linux.Seccomp != nil {
		t.Error("WithoutSeccomp left a profile")
	}
}

func TestWithNetwork(t *testing.T) {
	hasNet := func(s *specs.Spec) bool { return slices.Contains(nsTypes(s), specs.NetworkNamespace) }
	for _, tc := range []struct {
		mode    string
		ownNet  bool
		sysType string
	}{
		{"", true, "sysfs"},
		{NetworkNone, true, "sysfs"},
		{NetworkBridge, true, "sysfs"},
		{NetworkHost, false, "bind"},
	} {
		s, err := New(WithNetwork(tc.mode))
		if err != nil {
			t.Fatalf("%q: %v", tc.mode, err)
		}
		if hasNet(s) != tc.ownNet {
			t.Errorf("%q: own net ns = %v", tc.mode, hasNet(s))
		}
		n := 0
		for _, m := range s.Mounts {
			if m.Destination == "/sys" {
				n++
				if m.Type != tc.sysType || !slices.Contains(m.Options, "ro") {
					t.Errorf("%q: /sys mount %+v", tc.mode, m)
				}
				if tc.sysType == "bind" && (m.Source != "/sys" || !slices.Contains(m.Options, "rbind")) {
					t.Errorf("%q: /sys bind %+v", tc.mode, m)
				}
			}
		}
		if n != 1 {
			t.Errorf("%q: %d /sys mounts", tc.mode, n)
		}
	}
	// host then none restores the namespace and sysfs.
	s, err := New(WithNetwork(NetworkHost), WithNetwork(NetworkNone))
	if err != nil {
		t.Fatal(err)
	}
	if !hasNet(s) || mountAt(s, "/sys").Type != "sysfs" {
		t.Errorf("host→none: net=%v /sys=%+v", hasNet(s), mountAt(s, "/sys"))
	}
	if _, err := New(WithNetwork("container:x")); !errors.Is(err, ErrBadOption) {
		t.Errorf("unknown mode: err = %v", err)
	}
}

// Devices: deny all but the standard set, whatever else is asked.
func TestDevicesDenyAll(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Linux.Resources; r == nil || len(r.Devices) != 1 || r.Devices[0].Allow {
		t.Errorf("device rules %+v, want deny-all", r)
	}
}

func TestWithProcessAndUser(t *testing.T) {
	s, err := New(WithProcess([]string{"python", "-c", "1"}, []string{"A=1"}, ""), WithUser(1000, 100, []uint32{5}))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Process
	if !slices.Equal(p.Args, []string{"python", "-c", "1"}) || p.Cwd != "/" {
		t.Errorf("args %v cwd %q", p.Args, p.Cwd)
	}
	if !slices.Equal(p.Env, []string{DefaultPath, "A=1"}) {
		t.Errorf("env %v", p.Env)
	}
	if p.User.UID != 1000 || p.User.GID != 100 || !slices.Equal(p.User.AdditionalGids, []uint32{5}) {
		t.Errorf("user %+v", p.User)
	}

	s, err = New(WithProcess([]string{"sh"}, []string{"PATH=/bin", "B=2"}, "/w/"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Process.Env, []string{"PATH=/bin", "B=2"}) || s.Process.Cwd != "/w" {
		t.Errorf("env %v cwd %q", s.Process.Env, s.Process.Cwd)
	}

	for _, o := range []Opt{
		WithProcess(nil, nil, "/"),
		WithProcess([]string{"sh"}, nil, "rel"),
		WithProcess([]string{"sh"}, []string{"NOEQUALS"}, "/"),
		WithHostname(""),
		WithRootfs("", false),
		WithIDMappings(nil, nil),
		WithIDMappings([]specs.LinuxIDMapping{{HostID: 1}}, []specs.LinuxIDMapping{{HostID: 1, Size: 1}}),
		WithMounts([]specs.Mount{{Destination: "rel", Type: "bind", Source: "/x"}}),
	} {
		if _, err := New(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("err = %v, want ErrBadOption", err)
		}
	}
}

func TestOptionsDoNotAlias(t *testing.T) {
	args := []string{"a"}
	ms := []specs.Mount{{Destination: "/x", Type: "bind", Source: "/y", Options: []string{"rbind", "ro"}}}
	s, err := New(WithProcess(args, nil, "/"), WithMounts(ms))
	if err != nil {
		t.Fatal(err)
	}
	args[0] = "b"
	ms[0].Options[1] = "rw"
	if s.Process.Args[0] != "a" || mountAt(s, "/x").Options[1] != "ro" {
		t.Errorf("spec aliases caller data: %v %v", s.Process.Args, mountAt(s, "/x").Options)
	}
	// Two specs do not share default slices.
	a, _ := New()
	b, _ := New()
	a.Process.Capabilities.Bounding[0] = "CAP_SYS_ADMIN"
	a.Linux.MaskedPaths[0] = "x"
	if b.Process.Capabilities.Bounding[0] == "CAP_SYS_ADMIN" || DefaultCapabilities[0] == "CAP_SYS_ADMIN" || b.Linux.MaskedPaths[0] == "x" {
		t.Error("default slices are shared between specs")
	}
	// Mounts appended after the defaults, in order.
	s, _ = New(WithMounts([]specs.Mount{{Destination: "/a"}, {Destination: "/b"}}))
	n := len(s.Mounts)
	if s.Mounts[n-2].Destination != "/a" || s.Mounts[n-1].Destination != "/b" || s.Mounts[0].Destination != "/proc" {
		t.Errorf("mount order %v", s.Mounts)
	}
}
