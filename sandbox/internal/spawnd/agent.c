// slopbox's container init: PID 1 of every sandbox.
//
// It runs as a constructor, before the Go runtime starts, when the process
// was exec'd by libcontainer with _SLOPBOX_AGENT=1 in its environment, so a
// sandbox costs one small C process and no Go runtime (no per-sandbox
// daemon or shim). It
//   - reaps every orphan (it is the pid namespace's init);
//   - accepts exec requests on the listening unix socket it inherits as
//     fd 3. The socket lives in the host's per-user state directory and is
//     not reachable from inside the container. Each request carries argv,
//     env, cwd, uid/gid/groups and the three stdio fds (SCM_RIGHTS); the
//     agent forks, puts the child in a new session, switches user and execs.
//     Children inherit PID 1's seccomp filter, no_new_privs and bounded
//     capabilities. libcontainer sets up the last two; the filter, compiled
//     once by the host with libcontainer's code (sandbox/seccomp_linux.go), comes
//     in on the fd named by _SLOPBOX_SECCOMP_FD (u32 flags, then the BPF
//     instructions) and is loaded before the first request is read. If it
//     cannot be loaded, PID 1 exits: a sandbox never runs unfiltered.
//   - starts unclaimed when the spawn server prepares it ahead of need (a
//     pool entry): it then serves nothing until the server writes one byte
//     on the pipe named by _SLOPBOX_CLAIM_FD (the sandbox's mounts and
//     hostname are in place), and exits if the pipe closes first (the
//     server is gone), so an unused pool entry never outlives its server;
//   - runs each exec under a supervisor: a small fork of PID 1 that is a
//     child subreaper (PR_SET_CHILD_SUBREAPER), so every process the command
//     starts stays in the supervisor's subtree whatever it does (setsid,
//     double fork): orphans are re-parented to the supervisor, not to PID 1.
//     The supervisor reports the command's exit status on a pipe and lives
//     on while background processes of the command do. Should a supervisor
//     die another way (a command running as container root may kill it),
//     the processes re-parented to PID 1 are killed at once: no process can
//     leave its exec's tree;
//   - kills an exec's whole tree on request, or when the requesting
//     connection goes away (the slopbox process died), so no command
//     outlives its caller's interest.
//
// Wire format (host byte order; see sandbox/protocol.go, and
// TestProtocolMatchesAgent, which fails when the two differ):
//   request  := u32 length, then `length` bytes:
//               struct agent_req, groups[ngroups] (u32), cwd (len_cwd bytes),
//               argv (argc NUL-terminated), env (envc NUL-terminated)
//               with 3 fds attached to the first byte: stdin, stdout, stderr,
//               and optionally a 4th: the exec's own cgroup's cgroup.procs,
//               opened for writing by the host (the kernel checks the
//               opener's credentials and cgroup namespace), which the
//               command joins before it execs, so that a timeout kills
//               all it started with cgroup.kill
//   control  := u32 length == 12, then u32 magic, u32 op (OP_KILL), i32 signal
//   dial     := u32 length == 16, then u32 magic, u32 op (OP_DIAL),
//               u32 protocol (PROTO_TCP, PROTO_UDP), u32 port: PID 1
//               connects a socket to the port on the sandbox's loopback
//               (127.0.0.1, else ::1) and replies REPLY_STARTED with it
//               attached, or REPLY_FAILED with the errno (published
//               ports: the host accepts, the sandbox's namespace dials)
//   reply    := struct agent_reply; with FLAG_TTY, REPLY_STARTED carries
//               the terminal's master fd (SCM_RIGHTS)
//   winsize  := rows << 16 | cols of the terminal (FLAG_TTY only)
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <netinet/in.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define AGENT_MAGIC 0x534c4f50u /* "SLOP" */
#define OP_EXEC 1u
#define OP_KILL 2u
#define OP_DIAL 3u
#define PROTO_TCP 6u
#define PROTO_UDP 17u
#define FLAG_DETACH 1u /* keep running when the caller disconnects */
#define FLAG_TTY 2u    /* run on a new pseudo-terminal; its master goes back with the reply */
#define FLAG_MKCWD 4u  /* create a missing working directory first, as root (Docker's WorkingDir) */
#define REPLY_STARTED 1u
#define REPLY_FAILED 2u
#define REPLY_EXITED 3u
#define MAX_CONNS 256
#define MAX_REQ (64u << 20)
#define LISTEN_FD 3

struct agent_req {
	uint32_t magic, op, flags, uid, gid, ngroups, argc, envc, len_cwd, winsize;
};

struct agent_reply {
	uint32_t type;
	int32_t value;
};

struct conn {
	int fd;
	pid_t pid;    /* the exec's supervisor, 0 if none */
	int statfd;   /* the supervisor reports the command's wait status here */
	int done;     /* the command exited */
	int detached; /* leave the command running when the caller goes */
};

static struct conn conns[MAX_CONNS];
static int nconns;

/* Supervisors that still run (their exec's tree may outlive its conn). */
#define MAX_SUPS 4096
static pid_t sups[MAX_SUPS];
static int nsups;

static int read_full(int fd, void *buf, size_t n) {
	char *p = buf;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void reply(int fd, uint32_t type, int32_t value) {
	struct agent_reply r = {type, value};
	ssize_t w;
	do
		w = send(fd, &r, sizeof r, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
}

/* reply_fd is reply with fd attached (SCM_RIGHTS). */
static void reply_fd(int fd, uint32_t type, int32_t value, int pass) {
	struct agent_reply r = {type, value};
	struct iovec iov = {&r, sizeof r};
	char cbuf[CMSG_SPACE(sizeof(int))];
	memset(cbuf, 0, sizeof cbuf);
	struct msghdr msg = {0};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof cbuf;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &pass, sizeof(int));
	ssize_t w;
	do
		w = sendmsg(fd, &msg, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
}

/* open_pty opens a new pseudo-terminal in the sandbox's own devpts
 * instance: the master (returned) and its peer in *slave, owned by the
 * command's user, sized from winsize. -1 with errno on failure. */
static int open_pty(int *slave, uint32_t winsize, uid_t uid, gid_t gid) {
	int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -1;
	int unlock = 0;
	if (ioctl(m, TIOCSPTLCK, &unlock) < 0)
		goto fail;
	/* TIOCGPTPEER: the peer of this master, with no path lookup to race. */
	int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0)
		goto fail;
	if (fchown(s, uid, gid) < 0 || fchmod(s, 0620) < 0) {
		/* a gid outside the sandbox's map: leave the group as it is */
		if (fchown(s, uid, (gid_t)-1) < 0) {
			close(s);
			goto fail;
		}
	}
	struct winsize ws = {.ws_row = (unsigned short)(winsize >> 16), .ws_col = (unsigned short)(winsize & 0xffff)};
	if (ws.ws_row && ws.ws_col)
		ioctl(m, TIOCSWINSZ, &ws);
	*slave = s;
	return m;
fail:;
	int e = errno;
	close(m);
	errno = e;
	return -1;
}

struct proc {
	pid_t pid, ppid;
};

/* read_procs returns every process's pid and parent (from /proc) in a
 * malloc'd array, or NULL. */
static struct proc *read_procs(size_t *n) {
	*n = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return NULL;
	size_t cap = 256;
	struct proc *a = malloc(cap * sizeof *a);
	struct dirent *e;
	char path[64], buf[512];
	while (a && (e = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 1)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/stat", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (r <= 0)
			continue;
		buf[r] = 0;
		/* fields after the last ')': state ppid */
		char *p = strrchr(buf, ')');
		long pp;
		char state;
		if (!p || sscanf(p + 1, " %c %ld", &state, &pp) != 2)
			continue;
		if (*n == cap) {
			struct proc *b = realloc(a, 2 * cap * sizeof *a);
			if (!b) {
				free(a);
				a = NULL;
				break;
			}
			a = b;
			cap *= 2;
		}
		a[(*n)++] = (struct proc){(pid_t)pid, (pid_t)pp};
	}
	closedir(d);
	return a;
}

/* kill_tree sends sig to every descendant of root (not root itself), found
 * through the parent links in /proc. A second pass catches processes
 * forked while the first ran; the supervisor reaps them all. */
static void kill_tree(pid_t root, int sig) {
	if (root <= 1)
		return;
	for (int pass = 0; pass < 2; pass++) {
		size_t n;
		struct proc *a = read_procs(&n);
		if (!a)
			return;
		char *in = calloc(n + 1, 1);
		if (!in) {
			free(a);
			return;
		}
		/* Mark descendants until nothing changes (parents may be listed
		 * after their children). */
		for (int changed = 1; changed;) {
			changed = 0;
			for (size_t j = 0; j < n; j++) {
				if (in[j])
					continue;
				int hit = a[j].ppid == root;
				for (size_t k = 0; !hit && k < n; k++)
					hit = in[k] && a[k].pid == a[j].ppid;
				if (hit) {
					in[j] = 1;
					changed = 1;
				}
			}
		}
		for (size_t j = 0; j < n; j++)
			if (in[j])
				kill(a[j].pid, sig);
		free(in);
		free(a);
	}
}

/* kill_orphans kills every child of PID 1 that is not a supervisor, with
 * its tree: it was re-parented here because its supervisor died. */
static void kill_orphans(void) {
	size_t n;
	struct proc *a = read_procs(&n);
	if (!a)
		return;
	for (size_t j = 0; j < n; j++) {
		if (a[j].ppid != 1)
			continue;
		int sup = 0;
		for (int k = 0; k < nsups; k++)
			if (sups[k] == a[j].pid)
				sup = 1;
		if (!sup) {
			kill(a[j].pid, SIGSTOP); /* no more forks while its tree goes */
			kill_tree(a[j].pid, SIGKILL);
			kill(a[j].pid, SIGKILL);
		}
	}
	free(a);
}

/* close_except closes every fd from 3 up but the n (at most 8) in keep:
 * close_range over the gaps, a handful of system calls. */
static void close_except(const int *keep, int n) {
	int k[8], m = 0;
	for (int i = 0; i < n && m < 8; i++)
		if (keep[i] >= 3)
			k[m++] = keep[i];
	for (int i = 1; i < m; i++) /* insertion sort */
		for (int j = i; j > 0 && k[j - 1] > k[j]; j--) {
			int t = k[j];
			k[j] = k[j - 1];
			k[j - 1] = t;
		}
	unsigned lo = 3;
	for (int i = 0; i <= m; i++) {
		unsigned hi = i < m ? (unsigned)k[i] : ~0u;
		if (hi > lo && syscall(SYS_close_range, lo, hi - 1, 0) < 0)
			for (unsigned fd = lo; fd < hi && fd < 4096; fd++)
				close((int)fd);
		if (i < m)
			lo = (unsigned)k[i] + 1;
	}
}

static void child_exec(int status_fd, int fds[4], struct agent_req *rq, uint32_t *groups,
		       char *cwd, char **argv, char **envp) __attribute__((noreturn));

static void drop_conn(int i) {
	if (conns[i].pid > 0 && !conns[i].done && !conns[i].detached)
		kill_tree(conns[i].pid, SIGKILL);
	close(conns[i].fd);
	if (conns[i].statfd >= 0)
		close(conns[i].statfd);
	conns[i] = conns[--nconns];
}

/* supervise runs in the exec's supervisor (a fork of PID 1) and never
 * returns: it starts the command and reaps its tree. */
static void supervise(int status_fd, int stat_w, int fds[4], struct agent_req *rq, uint32_t *groups,
		      char *cwd, char **argv, char **envp) {
	prctl(PR_SET_NAME, "slopbox-exec");
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* Nothing of PID 1 stays open here: not its socket, not other execs'
	 * connections or pipes. */
	int keep[] = {status_fd, stat_w, fds[0], fds[1], fds[2], fds[3]};
	close_except(keep, 6);
	/* Only SIGKILL and SIGSTOP reach it: the command's signals to its
	 * process group or session do not. It waits without signals. */
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	/* vfork: the command replaces this copy at once (exec), so nothing
	 * of the supervisor needs copying. */
	pid_t cmd = vfork();
	if (cmd == 0) {
		close(stat_w);
		child_exec(status_fd, fds, rq, groups, cwd, argv, envp);
	}
	if (cmd < 0) {
		/* Say why, as a failed exec does: with the pipe merely closed, PID 1
		 * would report the command started, then killed (137), although
		 * it never ran (a fork refused for want of pids or memory). */
		int32_t v = errno;
		ssize_t w;
		do
			w = write(status_fd, &v, sizeof v);
		while (w < 0 && errno == EINTR);
		_exit(v == EAGAIN ? 125 : 124);
	}
	close(status_fd);
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			_exit(0); /* ECHILD: the whole tree is gone */
		if (p == cmd) {
			int32_t v = st;
			ssize_t w;
			do
				w = write(stat_w, &v, sizeof v);
			while (w < 0 && errno == EINTR);
			close(stat_w);
		}
	}
}

/* mkdir_p creates the absolute directory path and its missing parents,
 * mode 0755, inside the sandbox (as runc creates a container's cwd). */
static void mkdir_p(const char *path) {
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf || path[0] != '/')
		return;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != 0)
			continue;
		char c = *p;
		*p = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return;
		*p = c;
		if (c == 0)
			return;
	}
}

/* child_exec runs in the forked child and never returns. */
static void child_exec(int status_fd, int fds[4], struct agent_req *rq, uint32_t *groups,
		       char *cwd, char **argv, char **envp) {
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	setsid();
	/* Into the exec's cgroup before anything can fork. If the kernel
	 * refuses, the command still runs: the tree kill remains. */
	if (fds[3] >= 0) {
		ssize_t w = write(fds[3], "0", 1);
		(void)w;
		close(fds[3]);
	}
	for (int i = 0; i < 3; i++) {
		if (fds[i] < 0) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != i) {
				dup2(n, i);
				close(n);
			}
		} else if (fds[i] != i) {
			/* fds were moved above 3 before fork, so this never clobbers */
			dup2(fds[i], i);
		} else {
			fcntl(i, F_SETFD, 0);
		}
	}
	/* Every other fd of the agent is close-on-exec, so nothing leaks. */
	int err = 0;
	if ((rq->flags & FLAG_TTY) && ioctl(0, TIOCSCTTY, 0) < 0)
		err = errno;
	struct stat cst;
	if (!err && (rq->flags & FLAG_MKCWD) && rq->len_cwd > 0 && stat(cwd, &cst) < 0 && errno == ENOENT)
		mkdir_p(cwd);
	if (setgroups(rq->ngroups, (gid_t *)groups) < 0 && rq->ngroups > 0)
		err = errno;
	if (!err && setgid(rq->gid) < 0)
		err = errno;
	if (!err && setuid(rq->uid) < 0)
		err = errno;
	if (!err && rq->len_cwd > 0 && chdir(cwd) < 0)
		err = errno | (1 << 16); /* mark: failure was the working directory */
	if (!err) {
		environ = envp;
		execvp(argv[0], argv);
		err = errno;
	}
	int32_t v = err;
	ssize_t w = write(status_fd, &v, sizeof v);
	(void)w;
	_exit(127);
}

static int dup_high(int fd) {
	if (fd < 0)
		return fd;
	int n = fcntl(fd, F_DUPFD_CLOEXEC, 64);
	close(fd);
	return n;
}

static void handle_exec(int i, char *buf, uint32_t len, int fds[4]) {
	struct agent_req *rq = (struct agent_req *)buf;
	size_t off = sizeof *rq;
	if (len < off || rq->magic != AGENT_MAGIC || rq->argc == 0 || rq->argc > (1u << 20) ||
	    rq->envc > (1u << 20) || rq->ngroups > 65536 ||
	    (uint64_t)off + 4ull * rq->ngroups + rq->len_cwd > len) {
		reply(conns[i].fd, REPLY_FAILED, EINVAL);
		return;
	}
	uint32_t *groups = (uint32_t *)(buf + off);
	off += 4u * rq->ngroups;
	char *cwd = buf + off;
	off += rq->len_cwd;
	char **argv = calloc(rq->argc + 1, sizeof(char *));
	char **envp = calloc(rq->envc + 1, sizeof(char *));
	if (!argv || !envp) {
		free(argv);
		free(envp);
		reply(conns[i].fd, REPLY_FAILED, ENOMEM);
		return;
	}
	char *p = buf + off, *end = buf + len;
	for (uint32_t k = 0; k < rq->argc + rq->envc; k++) {
		char *z = memchr(p, 0, (size_t)(end - p));
		if (!z) {
			free(argv);
			free(envp);
			reply(conns[i].fd, REPLY_FAILED, EINVAL);
			return;
		}
		if (k < rq->argc)
			argv[k] = p;
		else
			envp[k - rq->argc] = p;
		p = z + 1;
	}
	/* cwd is not NUL-terminated on the wire: copy it */
	char cwdbuf[4096] = {0};
	if (rq->len_cwd >= sizeof cwdbuf) {
		free(argv);
		free(envp);
		reply(conns[i].fd, REPLY_FAILED, ENAMETOOLONG);
		return;
	}
	memcpy(cwdbuf, cwd, rq->len_cwd);

	int master = -1;
	if (rq->flags & FLAG_TTY) {
		/* The command's stdio is the terminal; the caller's fds go. */
		int slave;
		master = open_pty(&slave, rq->winsize, rq->uid, rq->gid);
		if (master < 0) {
			free(argv);
			free(envp);
			reply(conns[i].fd, REPLY_FAILED, errno);
			return;
		}
		for (int k = 0; k < 3; k++) {
			close(fds[k]);
			fds[k] = k == 0 ? dup_high(slave) : fcntl(fds[0], F_DUPFD_CLOEXEC, 64);
		}
	}
	int sp[2], ep[2];
	if (pipe2(sp, O_CLOEXEC) < 0) {
		if (master >= 0)
			close(master);
		free(argv);
		free(envp);
		reply(conns[i].fd, REPLY_FAILED, errno);
		return;
	}
	if (pipe2(ep, O_CLOEXEC) < 0) {
		close(sp[0]);
		close(sp[1]);
		if (master >= 0)
			close(master);
		free(argv);
		free(envp);
		reply(conns[i].fd, REPLY_FAILED, errno);
		return;
	}
	if (nsups >= MAX_SUPS) {
		close(sp[0]);
		close(sp[1]);
		close(ep[0]);
		close(ep[1]);
		if (master >= 0)
			close(master);
		free(argv);
		free(envp);
		reply(conns[i].fd, REPLY_FAILED, EAGAIN);
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(sp[0]);
		close(ep[0]);
		supervise(sp[1], ep[1], fds, rq, groups, cwdbuf, argv, envp);
	}
	int fork_errno = errno;
	close(sp[1]);
	close(ep[1]);
	free(argv);
	free(envp);
	if (pid < 0) {
		close(sp[0]);
		close(ep[0]);
		if (master >= 0)
			close(master);
		reply(conns[i].fd, REPLY_FAILED, fork_errno);
		return;
	}
	sups[nsups++] = pid;
	int32_t child_err = 0;
	ssize_t n;
	do
		n = read(sp[0], &child_err, sizeof child_err);
	while (n < 0 && errno == EINTR);
	close(sp[0]);
	if (n == (ssize_t)sizeof child_err) {
		/* exec failed: the child exits 127 and its supervisor with it,
		 * reaped by reap(); or the supervisor could not fork the child */
		close(ep[0]);
		if (master >= 0)
			close(master);
		reply(conns[i].fd, REPLY_FAILED, child_err);
		return;
	}
	conns[i].pid = pid;
	conns[i].statfd = ep[0];
	conns[i].done = 0;
	conns[i].detached = (rq->flags & FLAG_DETACH) != 0;
	if (master >= 0) {
		reply_fd(conns[i].fd, REPLY_STARTED, pid, master);
		close(master);
	} else {
		reply(conns[i].fd, REPLY_STARTED, pid);
	}
}

/* dial_loopback connects a socket of proto to port on the sandbox's
 * loopback, IPv4 first, ::1 when nothing listens there. PID 1 waits at
 * most 50 ms for a TCP handshake (on loopback it completes, or is refused,
 * at once); one still in progress then (the server's accept queue is full)
 * is handed over as it is, and the caller's writes wait for it. -errno on
 * failure. */
static int dial_loopback(uint32_t proto, uint32_t port) {
	int type = proto == PROTO_UDP ? SOCK_DGRAM : SOCK_STREAM;
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	int err = ECONNREFUSED;
	for (int v6 = 0; v6 < 2; v6++) {
		int s = socket(v6 ? AF_INET6 : AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0) {
			err = errno;
			continue;
		}
		int r = v6 ? connect(s, (struct sockaddr *)&a6, sizeof a6) : connect(s, (struct sockaddr *)&a4, sizeof a4);
		if (r < 0 && errno == EINPROGRESS) {
			struct pollfd p = {.fd = s, .events = POLLOUT};
			int n;
			do
				n = poll(&p, 1, 50);
			while (n < 0 && errno == EINTR);
			if (n <= 0)
				return s; /* still connecting */
			int soerr = 0;
			socklen_t sl = sizeof soerr;
			if (getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
				soerr = errno;
			r = soerr ? -1 : 0;
			errno = soerr;
		}
		if (r == 0)
			return s;
		err = errno;
		close(s);
		if (err != ECONNREFUSED && err != EADDRNOTAVAIL && err != EAFNOSUPPORT)
			break;
	}
	return -err;
}

/* handle_conn reads one message; returns -1 when the connection must go. */
static int handle_conn(int i) {
	int fd = conns[i].fd;
	uint32_t len;
	int fds[4] = {-1, -1, -1, -1};
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = {&len, sizeof len};
	struct msghdr msg = {0};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof cbuf;
	ssize_t r;
	do
		r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	while (r < 0 && errno == EINTR);
	if (r != sizeof len)
		return -1;
	int nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *in = (int *)CMSG_DATA(c);
			for (int j = 0; j < k; j++) {
				if (nfds < 4)
					fds[nfds++] = dup_high(in[j]);
				else
					close(in[j]);
			}
		}
	}
	int ret = 0;
	if (len < 8 || len > MAX_REQ) {
		ret = -1;
		goto out;
	}
	char *buf = malloc(len);
	if (!buf || read_full(fd, buf, len) < 0) {
		free(buf);
		ret = -1;
		goto out;
	}
	uint32_t op = ((uint32_t *)buf)[1];
	if (((uint32_t *)buf)[0] == AGENT_MAGIC && op == OP_KILL && len >= 12) {
		int sig = ((int32_t *)buf)[2];
		if (conns[i].pid > 0 && !conns[i].done)
			kill_tree(conns[i].pid, sig);
	} else if (((uint32_t *)buf)[0] == AGENT_MAGIC && op == OP_DIAL && len >= 16 && conns[i].pid == 0) {
		uint32_t proto = ((uint32_t *)buf)[2], port = ((uint32_t *)buf)[3];
		int s = (proto == PROTO_TCP || proto == PROTO_UDP) && port > 0 && port < 65536 ? dial_loopback(proto, port) : -EINVAL;
		if (s >= 0) {
			reply_fd(fd, REPLY_STARTED, 0, s);
			close(s);
		} else {
			reply(fd, REPLY_FAILED, -s);
		}
	} else if (((uint32_t *)buf)[0] == AGENT_MAGIC && op == OP_EXEC && conns[i].pid == 0 && (nfds == 3 || nfds == 4)) {
		handle_exec(i, buf, len, fds);
	} else {
		reply(fd, REPLY_FAILED, EINVAL);
	}
	free(buf);
out:
	for (int j = 0; j < 4; j++)
		if (fds[j] >= 0)
			close(fds[j]);
	return ret;
}

/* exited delivers the command's wait status its supervisor reported (or,
 * if the supervisor died first, that it was killed). */
static void exited(int i) {
	int32_t v;
	ssize_t n;
	do
		n = read(conns[i].statfd, &v, sizeof v);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof v)
		v = SIGKILL; /* the supervisor died: so did the command */
	close(conns[i].statfd);
	conns[i].statfd = -1;
	conns[i].done = 1;
	reply(conns[i].fd, REPLY_EXITED, v);
}

static void reap(void) {
	int status, orphans = 0;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		int sup = 0;
		for (int k = 0; k < nsups; k++) {
			if (sups[k] == pid) {
				sups[k] = sups[--nsups];
				sup = 1;
				break;
			}
		}
		/* A supervisor exits 0 once its tree is gone; any other end (it
		 * was killed) leaves its tree re-parented here. */
		if (sup && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			orphans = 1;
		if (!sup)
			orphans = 1;
	}
	if (orphans)
		kill_orphans();
}

/* load_seccomp reads the compiled filter from fd and installs it on PID 1,
 * so every command it starts inherits it. */
static int load_seccomp(int fd) {
	enum { MAX = 4 + 8 * BPF_MAXINSNS };
	static unsigned char buf[MAX + 1];
	size_t n = 0;
	for (;;) {
		ssize_t r = read(fd, buf + n, sizeof buf - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > MAX) {
			errno = E2BIG;
			return -1;
		}
	}
	close(fd);
	if (n <= 4 || (n - 4) % 8 != 0) {
		errno = EINVAL;
		return -1;
	}
	uint32_t flags;
	memcpy(&flags, buf, 4);
	struct sock_fprog prog = {
		.len = (unsigned short)((n - 4) / 8),
		.filter = (struct sock_filter *)(void *)(buf + 4),
	};
	/* libcontainer set no_new_privs already; without it an unprivileged
	 * load fails, so make sure rather than fail later. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (flags == 0)
		return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

static void agent_main(void) {
	unsetenv("_SLOPBOX_AGENT");
	const char *sfdenv = getenv("_SLOPBOX_SECCOMP_FD");
	if (sfdenv) {
		if (load_seccomp(atoi(sfdenv)) < 0) {
			fprintf(stderr, "slopbox-init: load seccomp filter: %s\n", strerror(errno));
			_exit(126);
		}
		unsetenv("_SLOPBOX_SECCOMP_FD");
	}
	/* libcontainer may leave a parent-death signal; a sandbox outlives the
	 * process that started it. */
	prctl(PR_SET_PDEATHSIG, 0);
	int claimfd = -1;
	const char *cfdenv = getenv("_SLOPBOX_CLAIM_FD");
	if (cfdenv) {
		claimfd = atoi(cfdenv);
		fcntl(claimfd, F_SETFD, FD_CLOEXEC);
		unsetenv("_SLOPBOX_CLAIM_FD");
	}
	prctl(PR_SET_NAME, "slopbox-init");
	/* Not dumpable: container processes cannot ptrace PID 1 or take its
	 * listening socket through /proc/1/fd. */
	prctl(PR_SET_DUMPABLE, 0);
	sigset_t mask;
	sigfillset(&mask);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		_exit(121);
	fcntl(LISTEN_FD, F_SETFD, FD_CLOEXEC);
	for (;;) {
		struct pollfd pfd[2 * MAX_CONNS + 3];
		pfd[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = LISTEN_FD, .events = claimfd < 0 && nconns < MAX_CONNS ? POLLIN : 0};
		for (int i = 0; i < nconns; i++)
			pfd[2 + i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
		/* Negative fds are ignored by poll. */
		for (int i = 0; i < nconns; i++)
			pfd[2 + nconns + i] = (struct pollfd){.fd = conns[i].done ? -1 : conns[i].statfd, .events = POLLIN};
		/* This slot is unused once claimed. */
		int claimslot = 2 + 2 * nconns;
		pfd[claimslot] = (struct pollfd){.fd = claimfd, .events = POLLIN};
		int n = poll(pfd, (nfds_t)(claimslot + 1), -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			_exit(122);
		}
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == sizeof si)
				;
			reap();
		}
		/* Exit statuses first, so a reply precedes a hang-up's kill. */
		for (int i = 0; i < nconns; i++)
			if (pfd[2 + nconns + i].revents && !conns[i].done && conns[i].statfd >= 0)
				exited(i);
		/* Walk connections from the end: drop_conn moves the last one. */
		for (int i = nconns - 1; i >= 0; i--) {
			short ev = pfd[2 + i].revents;
			if (!ev)
				continue;
			if ((ev & POLLIN) && handle_conn(i) == 0)
				continue;
			if (ev & (POLLIN | POLLHUP | POLLERR | POLLNVAL))
				drop_conn(i);
		}
		if (claimfd >= 0 && pfd[claimslot].revents) {
			char b;
			ssize_t r;
			do
				r = read(claimfd, &b, 1);
			while (r < 0 && errno == EINTR);
			if (r != 1)
				_exit(0); /* unclaimed, and the server is gone */
			close(claimfd);
			claimfd = -1;
		}
		if (pfd[1].revents & POLLIN) {
			int c = accept4(LISTEN_FD, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0)
				conns[nconns++] = (struct conn){.fd = c, .statfd = -1};
		}
		reap();
	}
}

__attribute__((constructor)) static void slopbox_agent(void) {
	const char *v = getenv("_SLOPBOX_AGENT");
	if (v && strcmp(v, "1") == 0)
		agent_main();
}
