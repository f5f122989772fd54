package image

import (
	"os"

	"golang.org/x/sys/unix"
)

// fsTopdirFL is FS_TOPDIR_FL from <linux/fs.h> ("chattr +T").
const fsTopdirFL = 0x00020000

// markTopDir asks the filesystem to treat dir as the top of a directory
// hierarchy: ext2/3/4 then place each new subdirectory in a block group of
// its own (the Orlov allocator) instead of beside its parent. Without it, a
// layer extracted right after another was deleted lands among thousands of
// just-freed inodes, which ext4 skips one by one: on the test machines that
// made a 170 MB pull 3–8 times slower. Best effort: other filesystems
// ignore or refuse the flag.
func markTopDir(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil || flags&fsTopdirFL != 0 {
		return
	}
	unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsTopdirFL))
}
