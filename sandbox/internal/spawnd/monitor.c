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
//   - waits for PID 1's report of the command's exit (REPLY_EXITED).
// Then, with the output drained (for at most 2 s), it execs the slopbox
// program that started it (an fd of it, fd 3), as
//   slopbox-monitor ROOT ID exited STATUS ok|lost
// under the same pid, which records the exit and stops (or removes) the
// sandbox: the Go runtime runs only once the command is done, never while
// the sandbox is idle. The forwarded signals stay blocked across that exec
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
// Invocation: argv = slopbox-monitor ROOT ID pipes|tty; fds:
//   3  the slopbox program to exec at the end (O_PATH)
//   4  the connection to the sandbox's PID 1 the command was started on
//   5  its stdout (with tty: the terminal's master)
//   6  its stderr (pipes only)
//   7… anything to hold open while the command runs (its stdin's writer)
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
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define AGENT_MAGIC 0x534c4f50u
#define OP_KILL 2u
#define REPLY_EXITED 3u
#define MAX_LOG (8 << 20)
#define READER_GRACE_MS 2000
#define DRAIN_MS 2000
#define LINE_MAX_BYTES (16 << 10)

#define FD_EXE 3
#define FD_AGENT 4
#define FD_OUT 5

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

/* rotate makes the log the one before, emptying that one first: a reader
 * still holding it open would keep its blocks on disk after the rename. A
 * reader holds a shared lock on it; wait for it, up to READER_GRACE_MS. */
static void rotate(void) {
	close(log_fd);
	log_fd = -1;
	int old = openat(dir_fd, "container.log.1", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (old >= 0) {
		long long deadline = now_ms() + READER_GRACE_MS;
		while (flock(old, LOCK_EX | LOCK_NB) < 0 && now_ms() < deadline)
			sleep_ms(5);
		int r = ftruncate(old, 0);
		(void)r;
		close(old);
	}
	renameat(dir_fd, "container.log", dir_fd, "container.log.1");
}

/* utf8_len returns the length of the valid UTF-8 sequence at p (n bytes
 * left), or 0 if it is not one (as Go's utf8.DecodeRune: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static int utf8_len(const unsigned char *p, size_t n) {
	unsigned c = p[0];
	int len;
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
	if ((size_t)len > n)
		return 0;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (int i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

/* escape writes p (n bytes) as the inside of a JSON string into out (at
 * most 6 bytes per input byte) and returns how much it wrote, or, with out
 * NULL, only counts. Invalid UTF-8 becomes U+FFFD, as Go's encoding/json
 * makes it. */
static size_t escape(const char *p, size_t n, char *out) {
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)p[i];
		const char *rep = NULL;
		char u[6];
		size_t k = 0;
		if (c == '"')
			rep = "\\\"";
		else if (c == '\\')
			rep = "\\\\";
		else if (c == '\n')
			rep = "\\n";
		else if (c == '\r')
			rep = "\\r";
		else if (c == '\t')
			rep = "\\t";
		else if (c < 0x20) {
			u[0] = '\\', u[1] = 'u', u[2] = '0', u[3] = '0', u[4] = hex[c >> 4], u[5] = hex[c & 15];
			k = 6;
		}
		if (rep) {
			k = strlen(rep);
			if (out)
				memcpy(out + o, rep, k);
			o += k;
			i++;
			continue;
		}
		if (k) {
			if (out)
				memcpy(out + o, u, k);
			o += k;
			i++;
			continue;
		}
		int l = utf8_len((const unsigned char *)p + i, n - i);
		if (l == 0) {
			if (out)
				memcpy(out + o, "\\ufffd", 6);
			o += 6;
			i++;
			continue;
		}
		if (out)
			memcpy(out + o, p + i, (size_t)l);
		o += (size_t)l;
		i += (size_t)l;
	}
	return o;
}

/* log_line appends one {"log","stream","time"} line for p (n bytes). */
static void log_line(const char *stream, const char *p, size_t n) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char head[64], tail[96];
	int hl = snprintf(head, sizeof head, "{\"log\":\"");
	int tl = snprintf(tail, sizeof tail, "\",\"stream\":\"%s\",\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ\"}\n",
			  stream, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec);
	long long total = hl + (long long)escape(p, n, NULL) + tl;
	if (log_fd >= 0 && log_size + total > MAX_LOG)
		rotate();
	if (log_fd < 0) {
		log_fd = openat(dir_fd, "container.log", O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (log_fd < 0)
			return;
		struct stat st;
		log_size = fstat(log_fd, &st) == 0 ? st.st_size : 0;
	}
	/* In pieces of at most 8 KiB: a reader keeps a partial line until its
	 * newline comes. */
	static char out[8192];
	size_t o = (size_t)hl;
	memcpy(out, head, (size_t)hl);
	for (size_t i = 0; i < n;) {
		size_t chunk = n - i < 1024 ? n - i : 1024;
		/* never split a UTF-8 sequence (at most 4 bytes) between chunks */
		while (chunk < n - i && chunk > 1020 && ((unsigned char)p[i + chunk] & 0xc0) == 0x80)
			chunk--;
		if (o + 6 * chunk > sizeof out) {
			if (write_all(log_fd, out, o) < 0)
				return;
			log_size += (long long)o;
			o = 0;
		}
		o += escape(p + i, chunk, out + o);
		i += chunk;
	}
	if (o + (size_t)tl > sizeof out) {
		if (write_all(log_fd, out, o) < 0)
			return;
		log_size += (long long)o;
		o = 0;
	}
	memcpy(out + o, tail, (size_t)tl);
	o += (size_t)tl;
	if (write_all(log_fd, out, o) == 0)
		log_size += (long long)o;
}

/* pump reads what stream s has and logs it a line at a time (a partial
 * line when a read ends without a newline, or at LINE_MAX_BYTES). */
static void pump(struct stream *s) {
	size_t room = LINE_MAX_BYTES - s->len;
	ssize_t r = read(s->fd, s->buf + s->len, room);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return;
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
		log_line(s->name, s->buf + start, rest);
		start = s->len;
		rest = 0;
	}
	if (rest > 0 && start > 0)
		memmove(s->buf, s->buf + start, rest);
	s->len = rest;
	if (end) {
		close(s->fd);
		s->fd = -1;
	}
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
	if (argc != 4 || (strcmp(argv[3], "pipes") != 0 && strcmp(argv[3], "tty") != 0)) {
		fprintf(stderr, "slopbox-monitor: internal use only\n");
		_exit(2);
	}
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
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	/* The state directory, ROOT/c/ID, once: the files are opened in it. */
	int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int cfd = rfd < 0 ? -1 : openat(rfd, "c", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	dir_fd = cfd < 0 || strchr(id, '/') || id[0] == '.' ? -1 : openat(cfd, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd >= 0)
		close(rfd);
	if (cfd >= 0)
		close(cfd);
	if (sfd >= 0 && dir_fd >= 0) {
		char pid[16];
		int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
		int fd = openat(dir_fd, "monitor.ready", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
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
		struct pollfd pfd[4] = {
			{.fd = sfd, .events = POLLIN},
			{.fd = agent, .events = POLLIN},
			{.fd = streams[0].fd, .events = POLLIN},
			{.fd = streams[1].fd, .events = POLLIN},
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
		int n = poll(pfd, 4, timeout);
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
			do
				r = recv(agent, &rep, sizeof rep, MSG_WAITALL);
			while (r < 0 && errno == EINTR);
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
	}
	if (log_fd >= 0)
		close(log_fd);
	if (dir_fd >= 0)
		close(dir_fd);
	for (int i = 0; i < 2; i++)
		if (streams[i].fd >= 0)
			close(streams[i].fd);
	if (agent >= 0) {
		close(agent);
		lost = 1;
	}
	if (sfd >= 0)
		close(sfd);
	/* The slopbox program records the exit and stops the sandbox. */
	char st[16];
	snprintf(st, sizeof st, "%d", (int)status);
	char *args[] = {"slopbox-monitor", (char *)root, (char *)id, "exited", st, lost ? "lost" : "ok", NULL};
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
