// slopbox's container monitor: one small host process per detached main
// command (run -d, start, the Engine API's start), in its own session,
// outliving the slopbox process that started it (podman's conmon plays this
// part). While the command runs it
//   - keeps the command's output as the sandbox's log, in docker's
//     json-file format ({"log","stream","time"} lines), bounded: at most
//     MAX_LOG bytes in container.log and the one before it
//     (container.log.1); a rotation waits up to READER_GRACE for readers
//     holding a shared flock on the one before (sandbox/monitor.go's
//     logTail), then empties it;
//   - holds the command's stdin open (docker run -di): the fds it is given
//     stay open as long as it runs;
//   - forwards the signals sent to it (docker kill -s) to the command's
//     processes, through PID 1 (OP_KILL);
//   - waits for PID 1's report of the command's exit (REPLY_EXITED);
//   - listens on monitor.sock in the state directory: each connection it
//     accepts is closed once what the command had written by then, and the
//     monitor had not read yet, is in the log (its partial line too), so
//     that a reader who connects first (sandbox/monitor.go's syncLog) finds
//     all of the command's output so far in the log, from its first byte.
// Then, with the output drained (for at most 2 s), it records the exit
// (exit.json) and, unless PID 1 went away first (stop, kill, rm: its
// stopper does the rest), execs the slopbox program that started it (an
// fd of it, fd 3), as
//   slopbox-monitor ROOT ID exited STATUS ok|lost
// under the same pid, which stops (or removes) the sandbox: the Go runtime
// runs only once the command has ended by itself, never while the sandbox
// is idle, nor on the way of a docker stop. The forwarded signals stay blocked across that exec
// (the Go runtime keeps a blocked signal blocked), so a late `kill -s`
// cannot end the process half-way.
//
// It is built two ways from this one file: on its own, static, against
// musl where the build machine has it (make: the binary slopbox embeds and
// installs, a few KiB of PSS per container), and into every Go program
// that imports package spawnd, where it runs as a constructor, before the
// Go runtime starts, when _SLOPBOX_MONITOR=1 is set (a program built
// without the embedded helper).
//
// Invocation: argv = slopbox-monitor ROOT ID pipes|pipes+stdin|tty; fds:
//   3  the slopbox program to exec at the end (O_PATH)
//   4  the connection to the sandbox's PID 1 the command was started on
//   5  its stdout (with tty: the terminal's master)
//   6  its stderr (pipes only)
//   7  its stdin's writer, held open while the command runs (pipes+stdin)
// Any other fd it inherits (one its caller's caller left without
// FD_CLOEXEC) is closed at once: the monitor outlives its caller, and must
// not hold that caller's pipes open for the command's lifetime.
//
// The sandbox's state directory is written, besides slopbox, by root of
// the store's user namespace (as root: an unprivileged host id that also
// extracts image layers), so the monitor (host root then) opens nothing
// there it did not check: no symlink, fifo or hard link is written through.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#define AGENT_MAGIC 0x534c4f50u
#define OP_KILL 2u
#define REPLY_EXITED 3u
/* A test build may bound the log lower, or wait less (monitor_fuzz_test.go). */
#ifndef MAX_LOG
#define MAX_LOG (8 << 20)
#endif
#ifndef READER_GRACE_MS
#define READER_GRACE_MS 2000
#endif
#define DRAIN_MS 2000
#define LINE_MAX_BYTES (16 << 10)

#define FD_EXE 3
#define FD_AGENT 4
#define FD_OUT 5

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

extern char **environ;

/* Small state together (a page or two of memory touched while idle); the
 * buffers are touched only once output comes. */
static int dir_fd = -1; /* the sandbox's state directory */
static int log_fd = -1;
static long long log_size;

struct stream {
	int fd; /* -1 once at its end */
	const char *name;
	size_t len;
	char *buf; /* LINE_MAX_BYTES */
};

static struct stream streams[2];
static char bufs[2][LINE_MAX_BYTES];

static long long now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int write_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* own_file reports whether fd is a regular file of this process's user
 * with no other name (no hard link to a file elsewhere). */
static int own_file(int fd) {
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == geteuid();
}

/* create opens name in the state directory as a new file of its own, to
 * write: whatever had that name (a fifo, a symlink, a hard link to another
 * file) is removed first. */
static int create(const char *name, int flags) {
	if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
		return -1;
	return openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, 0600);
}

/* write_exit records how the command ended (exit.json: sandbox/monitor.go's
 * exitRecord), here rather than in the slopbox program exec'd next, so that
 * a stopper waiting for the record (awaitExitRecord) does not wait for a Go
 * runtime to start: a new file renamed over the name. Not for a sandbox
 * whose state is gone (removed meanwhile). 0 once recorded. */
static int write_exit(int status, int lost) {
	struct stat st;
	if (dir_fd < 0 || fstatat(dir_fd, "state.json", &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -1;
	int code = lost ? 128 + SIGKILL : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (!gmtime_r(&ts.tv_sec, &tm))
		return -1;
	char rec[128], tmp[48];
	int n = snprintf(rec, sizeof rec, "{\"exit_code\":%d,\"finished_at\":\"%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ\"}\n", code,
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec);
	snprintf(tmp, sizeof tmp, ".tmp-exit.json-monitor-%d", (int)getpid());
	int fd = create(tmp, 0);
	if (fd < 0)
		return -1;
	int ok = n > 0 && n < (int)sizeof rec && write_all(fd, rec, (size_t)n) == 0;
	if (close(fd) < 0 || !ok || renameat(dir_fd, tmp, dir_fd, "exit.json") < 0) {
		unlinkat(dir_fd, tmp, 0);
		return -1;
	}
	return 0;
}

static int log_broken; /* the log ends with a partial line (a failed write) */

/* open_log opens the log to append to: the one there if it is a file of
 * the monitor's own (a restart appends to the run before's), else a new
 * one. */
static void open_log(void) {
	/* O_NONBLOCK: opening a fifo must not wait for a reader. */
	log_fd = openat(dir_fd, "container.log", O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
	if (log_fd >= 0 && !own_file(log_fd)) {
		close(log_fd);
		log_fd = -1;
	}
	if (log_fd < 0)
		log_fd = create("container.log", O_APPEND);
	if (log_fd < 0)
		return;
	struct stat st;
	log_size = fstat(log_fd, &st) == 0 ? st.st_size : 0;
	char last = '\n';
	log_broken = log_size > 0 && pread(log_fd, &last, 1, log_size - 1) == 1 && last != '\n';
}

/* rotate makes the log the one before, emptying that one first: a reader
 * still holding it open would keep its blocks on disk after the rename. A
 * reader holds a shared lock on it; wait for it, up to READER_GRACE_MS. */
static void rotate(void) {
	close(log_fd);
	log_fd = -1;
	int old = openat(dir_fd, "container.log.1", O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (old >= 0) {
		if (own_file(old)) {
			long long deadline = now_ms() + READER_GRACE_MS;
			while (flock(old, LOCK_EX | LOCK_NB) < 0 && now_ms() < deadline)
				sleep_ms(5);
			int r = ftruncate(old, 0);
			(void)r;
		}
		close(old);
	}
	renameat(dir_fd, "container.log", dir_fd, "container.log.1");
}

/* utf8_len returns the length of the UTF-8 sequence at p (n > 0 bytes
 * left) if it is a valid one, 0 if it is not (as Go's utf8.DecodeRune: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or -1 if it is
 * the valid start of one that n cuts short. */
static int utf8_len(const unsigned char *p, size_t n) {
	unsigned c = p[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xbf;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	for (size_t i = 1; i < len; i++) {
		if (i >= n)
			return -1;
		if (p[i] < lo || p[i] > hi)
			return 0;
		lo = 0x80, hi = 0xbf;
	}
	return (int)len;
}

/* whole returns how much of p (n bytes) ends on a character's end: all of
 * it but a valid start of a character that its end cuts short. A byte
 * that is not a continuation byte (10xxxxxx) always starts a character as
 * Go decodes the text, so only the last such byte can start that one. */
static size_t whole(const char *p, size_t n) {
	for (size_t j = n; j > 0 && n - j < 3;) {
		j--;
		if (((unsigned char)p[j] & 0xc0) != 0x80)
			return utf8_len((const unsigned char *)p + j, n - j) < 0 ? j : n;
	}
	return n;
}

/* esc1 writes the character at p (n > 0 bytes left) into u as the inside
 * of a JSON string: it returns how many bytes it wrote (at most 6) and
 * sets *used to how many of p it took. Invalid UTF-8 becomes U+FFFD, a
 * byte at a time, as Go's encoding/json makes it. */
static size_t esc1(const char *p, size_t n, char *u, size_t *used) {
	static const char hex[] = "0123456789abcdef";
	unsigned char c = (unsigned char)p[0];
	const char *rep = NULL;
	*used = 1;
	switch (c) {
	case '"':
		rep = "\\\"";
		break;
	case '\\':
		rep = "\\\\";
		break;
	case '\n':
		rep = "\\n";
		break;
	case '\r':
		rep = "\\r";
		break;
	case '\t':
		rep = "\\t";
		break;
	}
	if (rep) {
		memcpy(u, rep, 2);
		return 2;
	}
	if (c < 0x20) {
		u[0] = '\\', u[1] = 'u', u[2] = '0', u[3] = '0', u[4] = hex[c >> 4], u[5] = hex[c & 15];
		return 6;
	}
	int l = utf8_len((const unsigned char *)p, n);
	if (l <= 0) {
		memcpy(u, "\\ufffd", 6);
		return 6;
	}
	memcpy(u, p, (size_t)l);
	*used = (size_t)l;
	return (size_t)l;
}

/* The line being written, in writes of at most 8 KiB (a reader keeps a
 * partial line until its newline comes). */
static char out[8192];
static size_t out_len;
static int out_failed;

static void out_flush(void) {
	if (out_len > 0 && !out_failed) {
		if (write_all(log_fd, out, out_len) < 0)
			out_failed = 1;
		else
			log_size += (long long)out_len;
	}
	out_len = 0;
}

/* out_put adds k bytes (k <= sizeof out) to the line. */
static void out_put(const char *p, size_t k) {
	if (out_len + k > sizeof out)
		out_flush();
	memcpy(out + out_len, p, k);
	out_len += k;
}

#define TAIL_MAX 128

/* line_end writes the end of a line of stream, from the time on, into
 * tail (TAIL_MAX bytes) and returns its length. */
static size_t line_end(char *tail, const char *stream) {
	struct timespec ts;
	struct tm tm;
	/* RFC 3339 has years 0-9999 only. */
	if (clock_gettime(CLOCK_REALTIME, &ts) < 0 || ts.tv_sec < 0 || ts.tv_sec > 253402300799LL || !gmtime_r(&ts.tv_sec, &tm)) {
		ts.tv_sec = 0, ts.tv_nsec = 0;
		gmtime_r(&ts.tv_sec, &tm);
	}
	int n = snprintf(tail, TAIL_MAX, "\",\"stream\":\"%s\",\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ\"}\n",
			 stream, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)ts.tv_nsec);
	return n > 0 && n < TAIL_MAX ? (size_t)n : 0;
}

/* log_line appends one {"log","stream","time"} line for p (n bytes). */
static void log_line(const char *stream, const char *p, size_t n) {
	static const char head[] = "{\"log\":\"";
	char tail[TAIL_MAX], u[6];
	size_t tl = line_end(tail, stream), used;
	long long total = 1 + (long long)(sizeof head - 1) + (long long)tl;
	for (size_t i = 0; i < n; i += used)
		total += (long long)esc1(p + i, n - i, u, &used);
	if (log_fd < 0)
		open_log();
	if (log_fd >= 0 && log_size > 0 && log_size + total > MAX_LOG) {
		rotate();
		open_log();
	}
	if (log_fd < 0 || tl == 0)
		return;
	out_len = 0;
	out_failed = 0;
	if (log_broken) /* end the partial line before: readers skip it */
		out_put("\n", 1);
	out_put(head, sizeof head - 1);
	for (size_t i = 0; i < n; i += used)
		out_put(u, esc1(p + i, n - i, u, &used));
	out_put(tail, tl);
	out_flush();
	log_broken = out_failed;
	if (out_failed) { /* a write failed part-way (ENOSPC, EFBIG) */
		struct stat st;
		if (fstat(log_fd, &st) == 0)
			log_size = st.st_size;
	}
}

/* pump reads what stream s has and logs it a line at a time: a partial
 * line when a read ends without a newline, or at LINE_MAX_BYTES, but for
 * the start of a character that the read cut short, kept for the next.
 * It returns what read returned. */
static ssize_t pump(struct stream *s) {
	size_t room = LINE_MAX_BYTES - s->len;
	ssize_t r = read(s->fd, s->buf + s->len, room);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return r;
	int end = r <= 0; /* EOF, or EIO from a terminal whose last holder closed it */
	if (r > 0)
		s->len += (size_t)r;
	size_t start = 0;
	for (;;) {
		char *nl = memchr(s->buf + start, '\n', s->len - start);
		if (!nl)
			break;
		size_t k = (size_t)(nl - (s->buf + start)) + 1;
		log_line(s->name, s->buf + start, k);
		start += k;
	}
	size_t rest = s->len - start;
	if (rest > 0 && (end || rest == LINE_MAX_BYTES || (size_t)r < room)) {
		size_t k = end ? rest : whole(s->buf + start, rest);
		if (k > 0) {
			log_line(s->name, s->buf + start, k);
			start += k;
			rest -= k;
		}
	}
	if (rest > 0 && start > 0)
		memmove(s->buf, s->buf + start, rest);
	s->len = rest;
	if (end) {
		close(s->fd);
		s->fd = -1;
	}
	return r;
}

/* listen_sync listens on monitor.sock in the state directory, made anew
 * (whatever had the name is removed first), for syncLog's connections;
 * -1 if it cannot (a reader then reads the log without waiting). The
 * name is bound relative to the directory (fchdir, and back): any --root
 * fits sun_path, and no path is resolved again. */
static int listen_sync(void) {
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || cwd < 0 || (unlinkat(dir_fd, "monitor.sock", 0) < 0 && errno != ENOENT) || fchdir(dir_fd) < 0) {
		if (fd >= 0)
			close(fd);
		if (cwd >= 0)
			close(cwd);
		return -1;
	}
	struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = "monitor.sock"};
	mode_t old = umask(077);
	int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 64) == 0;
	umask(old);
	if (fchdir(cwd) < 0)
		ok = 0;
	close(cwd);
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

/* sync_log logs what the streams hold now: at most what each had unread
 * when called (FIONREAD), so a command that writes on and on cannot keep
 * it here. */
static void sync_log(void) {
	for (int i = 0; i < 2; i++) {
		int n = 0;
		if (streams[i].fd < 0 || ioctl(streams[i].fd, FIONREAD, &n) < 0)
			continue;
		for (long left = n; left > 0 && streams[i].fd >= 0;) {
			ssize_t r = pump(&streams[i]);
			if (r <= 0)
				break;
			left -= r;
		}
	}
}

/* answer_syncs accepts the connections waiting on lfd and, once the log
 * holds what the command has written so far, closes them: the answer. */
static void answer_syncs(int lfd) {
	int c[64], k = 0;
	while (k < 64) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && errno == EINTR)
			continue;
		if (fd < 0)
			break;
		c[k++] = fd;
	}
	if (k == 0)
		return;
	sync_log();
	while (k > 0)
		close(c[--k]);
}

/* close_from closes every fd from fd on. */
static void close_from(int fd) {
	if (syscall(SYS_close_range, fd, ~0U, 0) == 0)
		return;
	long max = sysconf(_SC_OPEN_MAX);
	for (long i = fd; i < (max > 0 && max < 65536 ? max : 65536); i++)
		close((int)i);
}

static void send_kill(int sig) {
	uint32_t msg[4] = {12, AGENT_MAGIC, OP_KILL, (uint32_t)sig};
	ssize_t w;
	do
		w = send(FD_AGENT, msg, sizeof msg, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
}

static void monitor_main(int argc, char **argv) __attribute__((noreturn));
static void monitor_main(int argc, char **argv) {
	unsetenv("_SLOPBOX_MONITOR");
	/* stdin, stdout and stderr are open (a file opened below is not
	 * mistaken for one). */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
			_exit(2);
	int nfds = 0; /* the fds given, from 3 on */
	if (argc == 4 && strcmp(argv[3], "pipes") == 0)
		nfds = 4;
	else if (argc == 4 && strcmp(argv[3], "pipes+stdin") == 0)
		nfds = 5;
	else if (argc == 4 && strcmp(argv[3], "tty") == 0)
		nfds = 3;
	for (int fd = 3; fd < 3 + nfds; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			nfds = 0;
	if (nfds == 0) {
		fprintf(stderr, "slopbox-monitor: internal use only\n");
		_exit(2);
	}
	close_from(3 + nfds);
	const char *root = argv[1], *id = argv[2];
	prctl(PR_SET_NAME, "slopbox-monitor");
	/* First of all: a signal sent to the monitor (kill -s) goes to the
	 * command's processes instead of ending the monitor. */
	static const int fwd[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGCONT, SIGWINCH, SIGABRT};
	sigset_t mask;
	sigemptyset(&mask);
	for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
		sigaddset(&mask, fwd[i]);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN); /* a log over RLIMIT_FSIZE fails its write (EFBIG) */
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	/* The state directory, ROOT/c/ID, once: the files are opened in it. */
	int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int cfd = rfd < 0 ? -1 : openat(rfd, "c", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	dir_fd = cfd < 0 || strchr(id, '/') || id[0] == '.' ? -1 : openat(cfd, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd >= 0)
		close(rfd);
	if (cfd >= 0)
		close(cfd);
	int lfd = dir_fd >= 0 ? listen_sync() : -1;
	if (sfd >= 0 && dir_fd >= 0) {
		char pid[16];
		int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
		int fd = create("monitor.ready", 0);
		if (fd >= 0) {
			write_all(fd, pid, (size_t)n);
			close(fd);
		}
	}
	int tty = strcmp(argv[3], "tty") == 0;
	streams[0] = (struct stream){.fd = FD_OUT, .name = "stdout", .buf = bufs[0]};
	streams[1] = (struct stream){.fd = tty ? -1 : FD_OUT + 1, .name = "stderr", .buf = bufs[1]};
	int agent = FD_AGENT, lost = 0;
	int32_t status = 0;
	long long deadline = -1; /* once the command has exited: the drain's end */
	for (;;) {
		struct pollfd pfd[5] = {
			{.fd = sfd, .events = POLLIN},
			{.fd = agent, .events = POLLIN},
			{.fd = streams[0].fd, .events = POLLIN},
			{.fd = streams[1].fd, .events = POLLIN},
			{.fd = lfd, .events = POLLIN},
		};
		if (deadline >= 0 && streams[0].fd < 0 && streams[1].fd < 0)
			break;
		int timeout = -1;
		if (deadline >= 0) {
			long long left = deadline - now_ms();
			if (left <= 0)
				break;
			timeout = (int)left;
		}
		int n = poll(pfd, 5, timeout);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
				if (agent >= 0)
					send_kill((int)si.ssi_signo);
		}
		if (pfd[1].revents) {
			struct {
				uint32_t type;
				int32_t value;
			} rep;
			ssize_t r;
			/* Not MSG_WAITALL: PID 1 sends the reply whole, and one
			 * that stops half-way must not stop the monitor. */
			do
				r = recv(agent, &rep, sizeof rep, MSG_DONTWAIT);
			while (r < 0 && errno == EINTR);
			if (r < 0 && errno == EAGAIN)
				continue;
			if (r == (ssize_t)sizeof rep && rep.type == REPLY_EXITED)
				status = rep.value;
			else
				lost = 1; /* the sandbox went away (stop, rm) */
			close(agent);
			agent = -1;
			/* Output written just before the exit is still in the pipes
			 * (or the terminal); what background processes keep writing
			 * is not waited for. */
			deadline = now_ms() + DRAIN_MS;
		}
		for (int i = 0; i < 2; i++)
			if (streams[i].fd >= 0 && pfd[2 + i].revents)
				pump(&streams[i]);
		if (pfd[4].revents)
			answer_syncs(lfd);
	}
	/* What the drain's end or a failed poll cut short. */
	for (int i = 0; i < 2; i++)
		if (streams[i].len > 0)
			log_line(streams[i].name, streams[i].buf, streams[i].len);
	if (log_fd >= 0)
		close(log_fd);
	/* The log is whole now: a reader waiting in the backlog is answered
	 * by the close. */
	if (lfd >= 0) {
		unlinkat(dir_fd, "monitor.sock", 0);
		close(lfd);
	}
	if (agent >= 0) {
		close(agent);
		agent = -1;
		lost = 1;
	}
	int recorded = write_exit(status, lost) == 0;
	/* No longer the forwarder of signals: a kill -s or stop signal from
	 * now on is refused (Signal), never sent to the slopbox program this
	 * process becomes, which a signal would end half-way. */
	if (dir_fd >= 0) {
		unlinkat(dir_fd, "monitor.ready", 0);
		close(dir_fd);
	}
	for (int i = 0; i < 2; i++)
		if (streams[i].fd >= 0)
			close(streams[i].fd);
	if (sfd >= 0)
		close(sfd);
	/* PID 1 went away (stop, kill, rm): its stopper does the rest, and with
	 * the exit recorded there is nothing left for the slopbox program. */
	if (lost && recorded)
		_exit(0);
	/* The slopbox program stops the sandbox (and records the exit, if that
	 * failed here). */
	char st[16];
	snprintf(st, sizeof st, "%d", (int)status);
	char *args[] = {"slopbox-monitor", (char *)root, (char *)id, "exited", st, lost ? "lost" : "ok", NULL};
	close_from(FD_EXE + 1); /* the stdin it held */
	signal(SIGPIPE, SIG_DFL);
	signal(SIGXFSZ, SIG_DFL);
	fcntl(FD_EXE, F_SETFD, FD_CLOEXEC);
	syscall(SYS_execveat, FD_EXE, "", args, environ, AT_EMPTY_PATH);
	fprintf(stderr, "slopbox-monitor: exec slopbox to record the exit: %s\n", strerror(errno));
	_exit(1);
}

#ifdef SLOPBOX_MONITOR_MAIN
int main(int argc, char **argv) { monitor_main(argc, argv); }
#else
/* In a Go program: before the Go runtime starts. glibc passes a
 * constructor the program's arguments. */
__attribute__((constructor)) static void slopbox_monitor(int argc, char **argv) {
	const char *v = getenv("_SLOPBOX_MONITOR");
	if (v && strcmp(v, "1") == 0)
		monitor_main(argc, argv);
}
#endif
