// Package sandbox runs long-lived containers ("sandboxes") over a host
// workspace through runc's libcontainer, embedded in-process. It is the only
// slopbox package that imports libcontainer (with its subpackage
// internal/spawnd, the spawn server).
//
// A sandbox is made of:
//   - a user namespace with the invoking user's subordinate id range (root
//     uses root's range), set up by internal/userns; container root is never
//     host root;
//   - an overlay root filesystem over the image's extracted layers with a
//     private upper directory, mounted inside that namespace (userxattr), so
//     nothing is copied and nothing is mounted on the host;
//   - a container created by libcontainer from a spec built by oci/ (new
//     pid, mount, ipc, uts, cgroup and, by default, network namespaces;
//     no_new_privs; Docker's capability set and seccomp profile; masked
//     /proc paths) whose PID 1 is slopbox's small C init (spawnd's agent.c):
//     it reaps zombies and starts commands on request;
//   - the sandbox's own bind mounts and hostname, put in place when PID 1 is
//     claimed: until then it serves nothing, which is what lets a Backend
//     keep sandboxes started ahead of need (pool.go).
//
// Exec does not re-enter the namespaces from outside: the host connects to
// PID 1's unix socket, which lives in the per-user state directory and is
// invisible from inside, and hands it argv, env, user and the stdio pipes.
// PID 1 forks and execs the command in a new session, inside every
// namespace and under the same seccomp filter, capability bounds and
// no_new_privs that libcontainer applied to it. This is what makes exec as
// cheap as a fork and lets any slopbox process exec into a sandbox another
// one created, as root and rootless alike. A command's whole session is
// killed on timeout, on Kill, and when the caller disappears.
//
// Programs that use this package must call Init first thing in main (the
// slopbox CLI does it in cmd/slopbox/init.go; tests in TestMain; New
// refuses to open a Backend otherwise), and must be linked
// statically: the spawn server's binary (the embedded slopbox-spawn, or the
// program itself) is bind-mounted into each sandbox as its init. Close the
// Backend when done: it stops the sandboxes kept ready.
package sandbox
