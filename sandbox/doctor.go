package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	cgsystemd "github.com/opencontainers/cgroups/systemd"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/oci"
)

// Check is one host check of Doctor.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // pass, warn or fail
	Detail string `json:"detail"`
	Remedy string `json:"remedy,omitempty"`
}

// Check statuses.
const (
	Pass = "pass"
	Warn = "warn"
	Fail = "fail"
)

const doctorOverlay = "sandbox-doctor-overlay"

func init() {
	// Inside a user namespace with the sandboxes' mapping: mount an
	// overlay as a sandbox's root filesystem is mounted.
	reexec.Register(doctorOverlay, func() int {
		dir := os.Args[1]
		for _, d := range []string{"lower", "upper", "work", "merged"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				fmt.Println(err)
				return 1
			}
		}
		data := fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work,userxattr", dir, dir, dir)
		if err := unix.Mount("overlay", filepath.Join(dir, "merged"), "overlay", 0, data); err != nil {
			fmt.Println(err)
			return 1
		}
		unix.Unmount(filepath.Join(dir, "merged"), unix.MNT_DETACH)
		return 0
	})
}

// Doctor checks what sandboxes need of this host, for this user: user
// namespaces, subordinate ids, newuidmap, overlayfs in a user namespace,
// the seccomp filter, cgroups (which limits hold), the store, and the
// network helpers. It changes nothing.
func (b *Backend) Doctor() []Check {
	rootless := os.Geteuid() != 0
	var out []Check
	add := func(name, status, detail, remedy string) {
		out = append(out, Check{Name: name, Status: status, Detail: detail, Remedy: remedy})
	}

	var uts unix.Utsname
	unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	if kernelAtLeast(release, 5, 11) {
		add("kernel", Pass, "Linux "+release, "")
	} else {
		add("kernel", Fail, "Linux "+release+": overlayfs in a user namespace needs 5.11", "run a newer kernel")
	}

	switch {
	case readInt("/proc/sys/user/max_user_namespaces") == 0:
		add("user namespaces", Fail, "user.max_user_namespaces is 0", "sysctl -w user.max_user_namespaces=15000")
	case rootless && readInt("/proc/sys/kernel/unprivileged_userns_clone") == 0:
		add("user namespaces", Fail, "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)", "sysctl -w kernel.unprivileged_userns_clone=1")
	case rootless && readInt("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1:
		add("user namespaces", Fail, "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+)",
			"allow them for slopbox with an AppArmor profile granting \"userns,\", or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
	default:
		add("user namespaces", Pass, "available", "")
	}

	m, err := userns.Current()
	switch {
	case err != nil:
		add("subordinate ids", Fail, err.Error(), "give the user a range in /etc/subuid and /etc/subgid")
	case m.Degraded:
		start := userns.FreeRange(userns.DefaultSize) // overlaps no range already given
		r := fmt.Sprintf("%d-%d", start, start+userns.DefaultSize-1)
		add("subordinate ids", Warn, m.Warning, "usermod --add-subuids "+r+" --add-subgids "+r+" "+currentUser())
	default:
		add("subordinate ids", Pass, fmt.Sprintf("uids %s, gids %s", idRange(m.UIDs), idRange(m.GIDs)), "")
	}
	if rootless {
		if p, err := exec.LookPath("newuidmap"); err != nil {
			add("newuidmap", Fail, "newuidmap/newgidmap not found", "apt-get install uidmap")
		} else {
			add("newuidmap", Pass, p, "")
		}
	}

	if err == nil {
		if msg := b.overlayInUserns(m); msg != "" {
			add("overlayfs in a user namespace", Fail, msg, "use Linux 5.11 or later, with overlayfs (modprobe overlay)")
		} else {
			add("overlayfs in a user namespace", Pass, "mounts with userxattr", "")
		}
	}

	if spec, err := oci.New(); err != nil {
		add("seccomp", Fail, err.Error(), "")
	} else if _, err := b.seccomp.get(spec.Linux.Seccomp); err != nil {
		add("seccomp", Fail, "compiling Docker's profile: "+err.Error(), "build slopbox with the seccomp tag and libseccomp (make build)")
	} else {
		add("seccomp", Pass, "Docker's profile compiles and loads (native architecture)", "")
	}

	add(cgroupCheck(rootless))

	if err := writable(b.root); err != nil {
		add("store", Fail, err.Error(), "choose a --root this user can write (and others can traverse)")
	} else {
		add("store", Pass, b.root, "")
	}

	helper := ""
	for _, h := range []string{"pasta", "slirp4netns"} {
		if _, err := exec.LookPath(h); err == nil {
			helper = h
			break
		}
	}
	var st unix.Stat_t
	tun := unix.Stat("/dev/net/tun", &st) == nil
	switch {
	case helper == "":
		add("network helper", Warn, "neither pasta nor slirp4netns is installed: bridge networking is not available (none and host are)", "apt-get install passt")
	case rootless && tun && st.Mode&0o006 != 0o006:
		add("network helper", Warn, fmt.Sprintf("/dev/net/tun is mode %#o: %s cannot open it as this user", st.Mode&0o777, helper), "chmod 0666 /dev/net/tun (as most distributions ship it)")
	default:
		add("network helper", Pass, helper, "")
	}
	return out
}

// overlayInUserns mounts an overlay in a user namespace with mapping m, as
// the spawn server does; "" when it works.
func (b *Backend) overlayInUserns(m userns.Mapping) string {
	dir, err := os.MkdirTemp(b.root, ".doctor-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	b.chownToNamespaceRoot(dir)
	cmd := userns.Command([]string{dir})
	cmd.Env = append(cmd.Env, reexec.Env+"="+doctorOverlay)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := userns.Start(cmd, m); err != nil {
		return err.Error()
	}
	if err := cmd.Wait(); err != nil {
		return strings.TrimSpace("mount: " + out.String())
	}
	return ""
}

// cgroupCheck says which limits hold for this user.
func cgroupCheck(rootless bool) (name, status, detail, remedy string) {
	name = "cgroups"
	var fs unix.Statfs_t
	v2 := unix.Statfs("/sys/fs/cgroup", &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC
	version := "v1 (hybrid)"
	if v2 {
		version = "v2"
	}
	if !rootless {
		return name, Pass, version + ": memory, cpus and pids limits are enforced", ""
	}
	if v2 {
		return cgroupV2Check(name)
	}
	return name, Warn, "v1 (hybrid): a user gets no cgroup, so memory, cpus and pids limits are not enforced rootless (results say so; --strict-limits refuses); /tmp and root filesystem sizes hold",
		"run as root, or on a cgroup v2 host that delegates controllers to the user"
}

// cgroupV2Check says where a rootless sandbox's limits go on cgroup v2:
// under the caller's own cgroup when it is writable with the controllers
// (a delegated scope, a container), else in a transient scope of the
// user's systemd manager, whose user@UID.service must have them delegated.
func cgroupV2Check(name string) (string, string, string, string) {
	const fsRoot = "/sys/fs/cgroup"
	wanted := []string{"memory", "cpu", "pids"}
	// Sandboxes' cgroups go under the parent of the caller's own (which
	// has processes, so no controllers for children).
	own, _ := os.ReadFile("/proc/self/cgroup")
	ownDir := filepath.Dir(filepath.Join(fsRoot, strings.TrimSpace(strings.TrimPrefix(string(own), "0::"))))
	if unix.Access(ownDir, unix.W_OK) == nil && len(missingControllers(ownDir, wanted)) == 0 {
		return name, Pass, "v2, " + strings.TrimPrefix(ownDir, fsRoot) + " is delegated to this user (memory, cpu, pids): limits are enforced", ""
	}
	uid := os.Getuid()
	remedy := fmt.Sprintf("a systemd user manager with Delegate=cpu cpuset io memory pids in a user@.service drop-in (log in, or loginctl enable-linger %s), and dbus-user-session for its bus", userName(uid))
	var why []string
	if !cgsystemd.IsRunningSystemd() {
		why = append(why, "the host was not booted with systemd")
		remedy = "run slopbox in a cgroup this user can write, with the memory, cpu and pids controllers"
	} else {
		if err := userControllers(wanted); err != nil {
			why = append(why, err.Error())
		}
		if userBus() != nil {
			why = append(why, fmt.Sprintf("no D-Bus user bus (DBUS_SESSION_BUS_ADDRESS unset, no $XDG_RUNTIME_DIR/bus, no /run/user/%d/bus)", uid))
		}
	}
	if len(why) == 0 {
		detail := fmt.Sprintf("v2, delegated to this user's systemd manager (user@%d.service: memory, cpu, pids): limits are enforced in a scope per sandbox", uid)
		if _, err := os.Stat("/var/lib/systemd/linger/" + userName(uid)); err != nil {
			return name, Warn, detail + "; but without linger the manager, and every sandbox with limits, ends at this user's last logout",
				"loginctl enable-linger " + userName(uid)
		}
		return name, Pass, detail, ""
	}
	return name, Warn, "v2, not delegated to this user: " + strings.Join(why, "; ") + " (and " + strings.TrimPrefix(ownDir, fsRoot) + ", above this process's cgroup, is not writable): memory, cpus and pids limits are not enforced (results say so; --strict-limits refuses)", remedy
}

// userName is uid's login name, or the number.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	fmt.Sscanf(release, "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

func readInt(p string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		return -1 // absent: not restricted
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".doctor-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return strconv.Itoa(os.Getuid())
}
