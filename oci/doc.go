// Package oci builds OCI runtime-spec documents for slopbox sandboxes.
//
// It is a pure builder: it never imports libcontainer and never changes
// anything on the host. New returns a secure default spec (user, pid, mount,
// ipc, uts, network and cgroup namespaces; no-new-privileges; Docker's
// default capability set; Docker's default seccomp profile; runc's masked
// and read-only paths) and applies options in order, in the style of
// containerd's SpecOpts:
//
//	spec, err := oci.New(
//		oci.WithRootfs(rootfs, false),
//		oci.WithProcess([]string{"/sbin/init"}, env, "/workspace"),
//		oci.WithIDMappings(uids, gids),
//		oci.WithMounts(binds),
//	)
//
// MountPlan.Resolve turns the workspace, extra mounts, spawn mounts and
// static assets into the final, validated list of bind mounts.
//
// The only host input read anywhere in the package is the running kernel's
// version (uname), which the default seccomp profile uses to decide which
// syscalls exist.
package oci
