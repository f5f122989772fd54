// Package local implements backend.Backend directly on the host, for trusted
// work: no namespaces, no image, the workspace is the host directory itself
// and commands see it at its host path. It registers itself as "local".
//
// A command runs the way it runs in a container: with setup enabled it goes
// through the entry script backend.EntryScript renders, run as
// "/bin/sh HANDLE_ENTRY.sh" with the workspace (or ExecRequest.Cwd, relative
// to it) as the working directory, and its output is split at the marker
// exactly as the sandbox backend splits it (last marker for Exec, first for
// Stream). With DisableSetup or ExecRequest.NoSetup, Argv runs directly and
// Shell runs as "/bin/sh -c Shell".
//
// Every command gets its own process group (and SIGKILL as parent-death
// signal). A timeout, Kill, context cancellation and Cleanup send SIGKILL to
// the whole group, so background children die too. Once the command's main
// process has exited, the pipes are drained for at most a short grace
// period: a background child that keeps them open (or one that left the
// group with setsid) cannot make Exec hang.
//
// What local does not provide: isolation of any kind. Network, Ports,
// Mounts, StaticAssets, Image and Workdir are not applied; resource limits
// cannot be enforced and are listed in Result.Unenforced (Limits.Strict
// turns them into a Spawn error). Processes that leave their process group
// (setsid, daemons) escape Kill and Cleanup. Commands run as the calling
// user; the container conventions for a default user (1000:1000 in the
// evaluation context) do not apply on the host. An explicit User switches
// users, which only root can do.
//
// Bugs of the Python local runtimes (seed reference §1.10, §1.11, §1.17)
// fixed here rather than copied:
//
//   - The entry script is written to a private per-sandbox directory, not to
//     the workspace, so a user file named HANDLE_ENTRY.sh is never
//     overwritten and nothing appears in the workspace or its snapshots.
//   - Setup runs through the same entry script as in containers, through a
//     shell, with its output in SetupStdout/SetupStderr (the Python local
//     runtime ran setup once, with shlex.split and no shell, and discarded
//     its output); DisableSetup is honoured (the pre-split runtime ignored it).
//   - Commands run in their own process group and timeouts/Kill kill the
//     group: grandchildren no longer survive.
//   - A timeout kills a silent command on time and host-side waiting is
//     bounded (process_stream waited for the process and joined its pump
//     with no timeout).
//   - Both pipes are read concurrently while the process runs, so output
//     larger than the 64 KiB pipe buffer cannot deadlock (the pre-split
//     runtime called wait() before reading).
//   - Streaming is incremental: chunks are delivered as they are read, not
//     after 8192 characters or at exit, and "\r\n" is not rewritten.
//   - Invalid UTF-8 becomes U+FFFD and a multi-byte character split across
//     reads is decoded whole (ensure_string dropped such chunks).
//   - Stream applies the spawn env (LocalStreamingRuntime ignored env_vars);
//     the precedence is host env (IncludeOSEnv) < SpecEnv < Env < request
//     Env everywhere, and PATH defaults to backend.DefaultPath.
//   - A missing command gives exit code 127 and a non-executable one 126
//     with the reason on stderr, instead of a result with exit code -1; a
//     command killed by signal N exits 128+N (-9 / -1 before).
//   - Poll distinguishes "running" from "never ran"; Cleanup of a sandbox
//     that never ran a command works, and is idempotent; every use after
//     Cleanup fails with backend.ErrClosed.
//   - Starting a command while one runs fails at once with backend.ErrBusy
//     (the Python runtime waited up to 10 s and then killed the old one).
package local
