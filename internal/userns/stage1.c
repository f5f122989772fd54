// Stage 1 of the user namespace set-up (userns.go), in C so that it costs
// an exec and not a Go runtime start: the child waits, unmapped and without
// capabilities, until the parent has written its uid and gid maps, then
// execs itself again to become root of the namespace with its full
// capability set. Userns.Init's stage-1 branch does the same in Go for a
// binary built without cgo.

#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

extern char **environ;

#define SYNC_FD 3

__attribute__((constructor)) static void slopbox_userns_stage1(int argc, char **argv) {
	const char *v = getenv("_SLOPBOX_USERNS_STAGE");
	if (v && strcmp(v, "2") == 0) {
		// Root of the namespace: the helper outlives the host process
		// that started it, whichever way it came (userns.go, Init).
		prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
		return;
	}
	if (v && strcmp(v, "join") == 0) {
		// Join the user namespace open on fd 3 (the network helper's:
		// its owner is this process's user, so setns grants the full
		// capability set there) and take a mount namespace of its own,
		// as a new namespace's helper has; then on as stage 2.
		if (setns(SYNC_FD, CLONE_NEWUSER) != 0) {
			fprintf(stderr, "slopbox: join the network helper's user namespace: %s\n", strerror(errno));
			_exit(125);
		}
		close(SYNC_FD);
		if (unshare(CLONE_NEWNS) != 0) {
			fprintf(stderr, "slopbox: new mount namespace: %s\n", strerror(errno));
			_exit(125);
		}
		prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
		setenv("_SLOPBOX_USERNS_STAGE", "2", 1);
		return;
	}
	if (!v || strcmp(v, "1") != 0 || argc < 1 || !argv)
		return;
	char b;
	ssize_t n;
	do
		n = read(SYNC_FD, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1) {
		fputs("slopbox: user namespace set-up was aborted\n", stderr);
		_exit(125);
	}
	close(SYNC_FD);
	if (setenv("_SLOPBOX_USERNS_STAGE", "2", 1) == 0)
		execve("/proc/self/exe", argv, environ);
	fprintf(stderr, "slopbox: re-exec in user namespace: %s\n", strerror(errno));
	_exit(125);
}
