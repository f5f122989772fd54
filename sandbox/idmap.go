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

// idmapClone (root only) returns a detached, idmapped clone of the
// directory fd (an O_PATH fd of a mount source, st its stat) in which its
// owner is the sandbox's user: files the sandbox writes there are owned on
// the host by that owner, never by host root and never by a stray
// subordinate id. Other container ids keep their usual host ids. It
// returns nil when the source already belongs to the user's own host ids
// (a root-owned one handed over): then a plain clone maps every id as the
// sandbox does. The mount is never attached on the host: the spawn server
// attaches it in the sandbox's mount namespace.
func idmapClone(fd int, st *unix.Stat_t, m userns.Mapping, uid, gid uint32) (*os.File, error) {
	if hu, ok := userns.ToHost(m.UIDs, uid); ok && hu == st.Uid {
		if hg, ok := userns.ToHost(m.GIDs, gid); ok && hg == st.Gid {
			return nil, nil // owned by the user's own host ids: a plain bind does
		}
	}
	return cloneIdmapped(fd, mountMap(st.Uid, m.UIDs[0], uid), mountMap(st.Gid, m.GIDs[0], gid))
}

// cloneIdmapped returns a detached, private clone of the mount source fd,
// idmapped through a user namespace with uidMap and gidMap.
func cloneIdmapped(fd int, uidMap, gidMap []syscall.SysProcIDMap) (*os.File, error) {
	nsfd, err := idmapUserns(uidMap, gidMap)
	if err != nil {
		return nil, fmt.Errorf("idmapped mount: %w", err)
	}
	defer unix.Close(nsfd)
	tfd, err := unix.OpenTree(fd, "", unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idmapped mount: open_tree: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsfd), Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tfd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(tfd)
		path, _ := fdPath(fd)
		return nil, fmt.Errorf("idmapped mount: the filesystem of %s does not support idmapped mounts (%w)", path, err)
	}
	return os.NewFile(uintptr(tfd), "idmapped-mount"), nil
}

// cloneSource (root only) returns a detached, private, recursive clone of
// the mount source fd (an rbind), made by the caller, who can open what the
// sandbox's ids may not even traverse to (a 0700 temporary directory).
func cloneSource(fd int) (*os.File, error) {
	tfd, err := unix.OpenTree(fd, "", unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("open_tree: %w", err)
	}
	attr := &unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(tfd)
		return nil, fmt.Errorf("make the mount private: %w", err)
	}
	return os.NewFile(uintptr(tfd), "bind-source"), nil
}

// handOverRootOwned (root only) gives the entries of the mount source pfd
// (an O_PATH fd, the workspace or a :U source) that
// belong to host uid 0 or gid 0 to the unprivileged host ids uid and gid
// (the sandbox user's own, in root's subordinate range), when the caller
// asks for it (:U, or docker's -w D -v TMPDIR:D idiom); a workspace is
// never handed over, but mounted idmapped. Host root still reads and
// removes everything, as before.
//
// The walk never follows a symlink (each entry is opened with O_NOFOLLOW
// and changed through that fd), never crosses into another mount, and
// leaves a file with more than one link as it is: a hardlink may share its
// inode with a file outside the workspace. chown clears setuid and setgid
// bits on the files it changes.
func handOverRootOwned(pfd int, uid, gid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR { // a bind-mounted file
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
			return nil
		}
		return chownRootOwned(pfd, uid, gid)
	}
	fd, err := unix.Openat(pfd, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return handOverDir(fd, st.Dev, uid, gid, 0)
}

// maxHandOverDepth bounds the walk (each level holds a directory fd).
const maxHandOverDepth = 256

// handOverDir hands over directory fd (closing it) and everything below it.
func handOverDir(fd int, dev uint64, uid, gid, depth int) error {
	dir := os.NewFile(uintptr(fd), "workspace-dir")
	defer dir.Close()
	if err := chownRootOwned(fd, uid, gid); err != nil {
		return err
	}
	if depth >= maxHandOverDepth {
		return nil
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		efd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(efd, &st); err != nil || st.Dev != dev {
			unix.Close(efd)
			continue // another mount: not the workspace's
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if st.Nlink == 1 {
				err = chownRootOwned(efd, uid, gid)
			}
			unix.Close(efd)
			if err != nil {
				return err
			}
			continue
		}
		// Reopen the directory itself (readable) through the O_PATH fd,
		// so a rename in between cannot swap in another one.
		dfd, err := unix.Openat(efd, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		unix.Close(efd)
		if err != nil {
			return err
		}
		if err := handOverDir(dfd, dev, uid, gid, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// chownRootOwned changes fd's owner from 0 to uid and its group from 0 to
// gid, and leaves other owners alone.
func chownRootOwned(fd, uid, gid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	newUID, newGID := -1, -1
	if st.Uid == 0 {
		newUID = uid
	}
	if st.Gid == 0 {
		newGID = gid
	}
	if newUID == -1 && newGID == -1 {
		return nil
	}
	return unix.Fchownat(fd, "", newUID, newGID, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
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
// The namespace lives as long as the fd: its one process is killed as soon
// as the fd is open, not left to start a Go runtime only to exit (that was
// three quarters of the 6 ms it took, paid for every idmapped mount).
func idmapUserns(uids, gids []syscall.SysProcIDMap) (int, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), reexec.Env+"="+holdHelper)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: uids,
		GidMappings: gids,
		Pdeathsig:   syscall.SIGKILL,
	}
	// It waits on its stdin, so it is there until killed.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	defer func() {
		stdin.Close() // it exits on EOF too, should the kill fail
		cmd.Process.Kill()
		// Reaped in the background: the wait for a killed process's exit
		// (1 to 2 ms) was on every idmapped sandbox's start.
		go cmd.Wait()
	}()
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

// sliceClone (root) is idmapClone for a sandbox with an id slice of its
// own (slice): a detached clone of the mount source fd (st its stat) in
// which the store's ids appear as the slice's, and an owner outside the
// store's range as the sandbox's user (uid, gid). Files the sandbox
// writes there are stored with the store's ids, or the outside owner's.
func sliceClone(fd int, st *unix.Stat_t, store, slice userns.Mapping, uid, gid uint32) (*os.File, error) {
	return cloneIdmapped(fd, sliceMap(st.Uid, store.UIDs[0], slice.UIDs[0], uid), sliceMap(st.Gid, store.GIDs[0], slice.GIDs[0], gid))
}

// sliceMap maps the store's range onto the slice's and, when the on-disk
// owner is outside the store's range, that owner onto the sandbox user's
// id in the slice (the store's id for that user then stays unmapped).
func sliceMap(owner uint32, store, slice userns.IDMap, user uint32) []syscall.SysProcIDMap {
	size := min(store.Size, slice.Size)
	if owner >= store.HostID && owner-store.HostID < size || user >= size {
		return storeOntoSlice(store, slice)
	}
	maps := []syscall.SysProcIDMap{{ContainerID: int(owner), HostID: int(slice.HostID + user), Size: 1}}
	if user > 0 {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: int(store.HostID), HostID: int(slice.HostID), Size: int(user)})
	}
	if rest := size - user - 1; rest > 0 {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: int(store.HostID + user + 1), HostID: int(slice.HostID + user + 1), Size: int(rest)})
	}
	return maps
}

// storeOntoSlice maps the store's range onto the slice's, and nothing else.
func storeOntoSlice(store, slice userns.IDMap) []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: int(store.HostID), HostID: int(slice.HostID), Size: int(min(store.Size, slice.Size))}}
}

// keptClone (root) returns a detached clone of the mount source fd with
// its host owners kept (backend.Mount.KeepOwners): no owner is mapped onto
// the sandbox's user. Ids of the store's range appear as in any sandbox
// (with slice, the sandbox's own id slice, through an idmapped mount of
// the store's range onto the slice's, as sliceClone maps them); every
// other owner, host root included, is unmapped in the sandbox and appears
// as nobody, on which container root has no capability: it reaches such
// files and sockets only through their permission bits for others, as any
// other local user would.
func keptClone(fd int, store userns.Mapping, slice *userns.Mapping) (*os.File, error) {
	if slice == nil {
		return cloneSource(fd)
	}
	return cloneIdmapped(fd, storeOntoSlice(store.UIDs[0], slice.UIDs[0]), storeOntoSlice(store.GIDs[0], slice.GIDs[0]))
}
