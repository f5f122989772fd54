package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
)

const holdHelper = "sandbox-userns-hold"

func init() {
	// A process that only holds a user namespace open until stdin closes.
	reexec.Register(holdHelper, func() int {
		var b [1]byte
		os.Stdin.Read(b[:])
		return 0
	})
}

// idmapWorkspace (root only) returns a detached, idmapped clone of the
// workspace in which its owner is the sandbox's user: files the sandbox
// writes there are owned on the host by the workspace's owner, never by host
// root and never by a stray subordinate id. Other container ids keep their
// usual host ids. The mount is never attached on the host: the spawn helper
// attaches it in its own mount namespace, from where the sandbox binds it.
func idmapWorkspace(ws string, m userns.Mapping, uid, gid uint32) (*os.File, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(ws, &st); err != nil {
		return nil, err
	}
	nsfd, err := idmapUserns(mountMap(st.Uid, m.UIDs[0], uid), mountMap(st.Gid, m.GIDs[0], gid))
	if err != nil {
		return nil, fmt.Errorf("idmapped workspace: %w", err)
	}
	defer unix.Close(nsfd)
	fd, err := unix.OpenTree(unix.AT_FDCWD, ws, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idmapped workspace: open_tree %s: %w", ws, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsfd), Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("idmapped workspace: the filesystem of %s does not support idmapped mounts (%w)", ws, err)
	}
	return os.NewFile(uintptr(fd), "idmapped-workspace"), nil
}

// mountMap maps the on-disk owner to the sandbox user's host id and keeps
// the rest of the container range as it is.
func mountMap(owner uint32, root userns.IDMap, user uint32) []syscall.SysProcIDMap {
	base, size := int(root.HostID), int(root.Size)
	maps := []syscall.SysProcIDMap{{ContainerID: int(owner), HostID: base + int(user), Size: 1}}
	if int(owner) >= base && int(owner) < base+size {
		return maps // the owner is itself a container id: nothing else fits
	}
	if user > 0 {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: base, HostID: base, Size: int(user)})
	}
	if rest := size - int(user) - 1; rest > 0 {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: base + int(user) + 1, HostID: base + int(user) + 1, Size: rest})
	}
	return maps
}

// idmapUserns returns an fd of a new user namespace with the given maps.
func idmapUserns(uids, gids []syscall.SysProcIDMap) (int, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), reexec.Env+"="+holdHelper)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: uids,
		GidMappings: gids,
		Pdeathsig:   syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	return unix.Open(filepath.Join("/proc", fmt.Sprint(cmd.Process.Pid), "ns", "user"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// unmountStale detaches host mounts a killed slopbox may have left in a
// sandbox directory, and refuses to go on if one remains: removing the
// directory must never reach into a workspace.
func unmountStale(dir string) error {
	target := filepath.Join(dir, "ws")
	for range 4 {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			break
		}
	}
	var st, parent unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if err := unix.Lstat(dir, &parent); err != nil {
		return err
	}
	if st.Dev != parent.Dev {
		return fmt.Errorf("%s is still a mount point; not removing the sandbox directory", target)
	}
	return nil
}
