/*
 * ironclaw-steward: pid 1 of a sealed native sandbox while it only runs
 * commands. See ../doc.go for the design; this file is the whole program.
 *
 * The Go init (inside/boot) builds the root, seals itself and then
 * executes this program in its place, so an idle sandbox holds one thread
 * and a few pages instead of a Go runtime. The steward forks and execs
 * commands, signals them and reports their exits over the same control
 * socket and in the same JSON messages the Go agent uses (package wire).
 * Any other request (a file operation, a gated run, anything it does not
 * understand) it leaves unread on the socket and executes the Go agent in
 * its place, handing over the commands it runs; the Go agent answers it
 * and, once idle, executes the steward again.
 *
 * It never seals anything: it refuses to run unless it is pid 1 and
 * already sealed (no_new_privs, a seccomp filter, no capabilities), which
 * it inherits across execve from the Go stage. What reaches it is the
 * daemon's (trusted) requests; a malformed or surprising one is handed to
 * the Go agent, whose decoder is the reference.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "steward.h"

/* The handover protocol's version (wire.StewardProtocol on the Go side),
 * in a section of its own, which the daemon reads before it uses the
 * file without reading the rest. */
static const char marker[] __attribute__((used, section(".ironclaw.protocol"))) = "ironclaw-steward protocol 1";

#define MAX_ITEMS (MAX_PACKET / 3 + 2)

int ctl = -1, self_fd = -1, agent_fd = -1;
int oom_fd = -1;
char oom_own[16], oom_workload[16];

char pkt[MAX_PACKET + 1];
static char *argv_items[MAX_ITEMS];
static char *env_items[MAX_ITEMS];

struct run {
	int pid;
	unsigned long long id;
};
static struct run *runs;
static size_t nruns, capruns;

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ironclaw: sandbox steward: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* ---- the commands pid 1 runs ---- */

static void run_add(int pid, unsigned long long id)
{
	if (nruns == capruns) {
		size_t n = capruns ? capruns * 2 : 16;
		struct run *r = realloc(runs, n * sizeof *r);
		if (!r)
			die("out of memory");
		runs = r;
		capruns = n;
	}
	runs[nruns].pid = pid;
	runs[nruns].id = id;
	nruns++;
}

static struct run *run_by_pid(int pid)
{
	for (size_t i = 0; i < nruns; i++)
		if (runs[i].pid == pid)
			return &runs[i];
	return NULL;
}

static struct run *run_by_id(unsigned long long id)
{
	for (size_t i = 0; i < nruns; i++)
		if (runs[i].id == id)
			return &runs[i];
	return NULL;
}

static void run_del(struct run *r) { *r = runs[--nruns]; }

/* ---- replies ---- */

void send_packet(const char *b, size_t n, const int *fds, int nfds)
{
	struct iovec iov = {.iov_base = (void *)b, .iov_len = n};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0 && nfds <= MAX_FDS) {
		memset(&u, 0, sizeof u);
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	while (sendmsg(ctl, &m, MSG_NOSIGNAL) < 0) {
		if (errno == EINTR)
			continue;
		exit(0); /* the daemon hung up: the sandbox ends with us */
	}
}

static void reply_started(unsigned long long id, int pid, int master)
{
	char b[96];
	int n = snprintf(b, sizeof b, "{\"op\":\"started\",\"id\":%llu,\"pid\":%d}", id, pid);
	send_packet(b, (size_t)n, &master, master >= 0 ? 1 : 0);
}

static void reply_exited(unsigned long long id, int status)
{
	char b[96];
	int n = snprintf(b, sizeof b, "{\"op\":\"exited\",\"id\":%llu,\"status\":%d}", id, status);
	send_packet(b, (size_t)n, NULL, 0);
}

/* errtext is the Go runtime's wording of an errno: glibc's, lower-cased
 * first letter (they agree for every errno a start can fail with). */
void errtext(int e, char *out, size_t n)
{
	snprintf(out, n, "%s", strerror(e));
	if (out[0] >= 'A' && out[0] <= 'Z' && !(out[1] >= 'A' && out[1] <= 'Z'))
		out[0] = (char)(out[0] - 'A' + 'a');
}

/* reply_failed sends a failed reply; msg is escaped for JSON. */
void reply_failed(unsigned long long id, const char *code, int err, const char *msg)
{
	static char b[2 * MAX_PACKET];
	size_t n = (size_t)snprintf(b, sizeof b, "{\"op\":\"failed\",\"id\":%llu,\"code\":\"%s\",\"errno\":%d,\"err\":\"", id, code, err);
	for (const unsigned char *p = (const unsigned char *)msg; *p && n < sizeof b - 16; p++) {
		if (*p == '"' || *p == '\\') {
			b[n++] = '\\';
			b[n++] = (char)*p;
		} else if (*p < 0x20) {
			n += (size_t)snprintf(b + n, sizeof b - n, "\\u%04x", *p);
		} else {
			b[n++] = (char)*p;
		}
	}
	b[n++] = '"';
	b[n++] = '}';
	send_packet(b, n, NULL, 0);
}

/* ---- requests: the subset of wire.Request's JSON this program serves ---- */

struct request {
	char op[16];
	unsigned long long id;
	char **argv, **env;
	size_t nargv, nenv;
	const char *dir, *gate;
	int tty, has_signal, sig;
	unsigned rows, cols;
};

struct parser {
	char *p, *end;
};

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int hex4(const char *s, const char *end, unsigned *v)
{
	if (end - s < 4)
		return -1;
	*v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(s[i]);
		if (h < 0)
			return -1;
		*v = *v << 4 | (unsigned)h;
	}
	return 0;
}

/* parse_string decodes a JSON string in place and NUL-terminates it. It
 * fails (-1) on anything malformed and on an escaped NUL, which a C
 * string cannot carry: the Go agent answers those. The decoded form is
 * never longer than the escaped one, so it fits where it was. */
static int parse_string(struct parser *ps, char **out)
{
	if (ps->p >= ps->end || *ps->p != '"')
		return -1;
	char *r = ++ps->p, *w = r;
	*out = w;
	while (r < ps->end && *r != '"') {
		unsigned char c = (unsigned char)*r;
		if (c < 0x20)
			return -1;
		if (c != '\\') {
			*w++ = *r++;
			continue;
		}
		if (++r >= ps->end)
			return -1;
		switch (*r++) {
		case '"': *w++ = '"'; break;
		case '\\': *w++ = '\\'; break;
		case '/': *w++ = '/'; break;
		case 'b': *w++ = '\b'; break;
		case 'f': *w++ = '\f'; break;
		case 'n': *w++ = '\n'; break;
		case 'r': *w++ = '\r'; break;
		case 't': *w++ = '\t'; break;
		case 'u': {
			unsigned u, lo;
			if (hex4(r, ps->end, &u) < 0)
				return -1;
			r += 4;
			if (u >= 0xd800 && u < 0xdc00) {
				if (ps->end - r < 6 || r[0] != '\\' || r[1] != 'u' || hex4(r + 2, ps->end, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
					u = 0xfffd; /* a lone surrogate, as Go decodes it */
				else {
					u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
					r += 6;
				}
			} else if (u >= 0xdc00 && u < 0xe000) {
				u = 0xfffd;
			}
			if (u == 0)
				return -1;
			if (u < 0x80) {
				*w++ = (char)u;
			} else if (u < 0x800) {
				*w++ = (char)(0xc0 | u >> 6);
				*w++ = (char)(0x80 | (u & 0x3f));
			} else if (u < 0x10000) {
				*w++ = (char)(0xe0 | u >> 12);
				*w++ = (char)(0x80 | (u >> 6 & 0x3f));
				*w++ = (char)(0x80 | (u & 0x3f));
			} else {
				*w++ = (char)(0xf0 | u >> 18);
				*w++ = (char)(0x80 | (u >> 12 & 0x3f));
				*w++ = (char)(0x80 | (u >> 6 & 0x3f));
				*w++ = (char)(0x80 | (u & 0x3f));
			}
			break;
		}
		default:
			return -1;
		}
	}
	if (r >= ps->end)
		return -1;
	ps->p = r + 1;
	*w = '\0';
	return 0;
}

static int parse_uint(struct parser *ps, unsigned long long max, unsigned long long *v)
{
	*v = 0;
	if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
		return -1;
	if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')
		return -1;
	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
		unsigned d = (unsigned)(*ps->p++ - '0');
		if (*v > (max - d) / 10)
			return -1;
		*v = *v * 10 + d;
	}
	return 0;
}

static int parse_strings(struct parser *ps, char **items, size_t *n)
{
	*n = 0;
	skip_ws(ps);
	if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0) {
		ps->p += 4;
		items[0] = NULL;
		return 0;
	}
	if (ps->p >= ps->end || *ps->p++ != '[')
		return -1;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		items[0] = NULL;
		return 0;
	}
	for (;;) {
		skip_ws(ps);
		if (*n >= MAX_ITEMS - 1 || parse_string(ps, &items[*n]) < 0)
			return -1;
		(*n)++;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return -1;
		if (*ps->p == ']') {
			ps->p++;
			break;
		}
		if (*ps->p++ != ',')
			return -1;
	}
	items[*n] = NULL;
	return 0;
}

static int parse_bool(struct parser *ps, int *v)
{
	if (ps->end - ps->p >= 4 && memcmp(ps->p, "true", 4) == 0) {
		ps->p += 4;
		*v = 1;
		return 0;
	}
	if (ps->end - ps->p >= 5 && memcmp(ps->p, "false", 5) == 0) {
		ps->p += 5;
		*v = 0;
		return 0;
	}
	return -1;
}

/* parse_request reads one request. A key it does not know fails it, so a
 * request the steward cannot serve whole goes to the Go agent. */
static int parse_request(char *b, size_t n, struct request *rq)
{
	struct parser ps = {b, b + n};
	memset(rq, 0, sizeof *rq);
	rq->argv = argv_items;
	rq->env = env_items;
	argv_items[0] = env_items[0] = NULL;
	skip_ws(&ps);
	if (ps.p >= ps.end || *ps.p++ != '{')
		return -1;
	skip_ws(&ps);
	if (ps.p < ps.end && *ps.p == '}')
		return -1;
	for (;;) {
		char *key;
		unsigned long long v;
		skip_ws(&ps);
		if (parse_string(&ps, &key) < 0)
			return -1;
		skip_ws(&ps);
		if (ps.p >= ps.end || *ps.p++ != ':')
			return -1;
		skip_ws(&ps);
		if (strcmp(key, "op") == 0) {
			char *s;
			if (parse_string(&ps, &s) < 0 || strlen(s) >= sizeof rq->op)
				return -1;
			strcpy(rq->op, s);
		} else if (strcmp(key, "id") == 0) {
			if (parse_uint(&ps, ULLONG_MAX, &rq->id) < 0)
				return -1;
		} else if (strcmp(key, "argv") == 0) {
			if (parse_strings(&ps, argv_items, &rq->nargv) < 0)
				return -1;
		} else if (strcmp(key, "env") == 0) {
			if (parse_strings(&ps, env_items, &rq->nenv) < 0)
				return -1;
		} else if (strcmp(key, "dir") == 0) {
			char *s;
			if (parse_string(&ps, &s) < 0)
				return -1;
			rq->dir = s;
		} else if (strcmp(key, "gate") == 0) {
			char *s;
			if (parse_string(&ps, &s) < 0)
				return -1;
			rq->gate = s;
		} else if (strcmp(key, "tty") == 0) {
			if (parse_bool(&ps, &rq->tty) < 0)
				return -1;
		} else if (strcmp(key, "rows") == 0 || strcmp(key, "cols") == 0) {
			if (parse_uint(&ps, 65535, &v) < 0)
				return -1;
			if (key[0] == 'r')
				rq->rows = (unsigned)v;
			else
				rq->cols = (unsigned)v;
		} else if (strcmp(key, "signal") == 0) {
			if (parse_uint(&ps, 64, &v) < 0)
				return -1;
			rq->has_signal = 1;
			rq->sig = (int)v;
		} else {
			return -1;
		}
		skip_ws(&ps);
		if (ps.p >= ps.end)
			return -1;
		if (*ps.p == '}') {
			ps.p++;
			break;
		}
		if (*ps.p++ != ',')
			return -1;
	}
	skip_ws(&ps);
	return ps.p == ps.end && rq->op[0] ? 0 : -1;
}

/* ---- starting a command (inside/boot's agent.start, in C) ---- */

/* check_executable and look_path are package execpath's Look. */
static int check_executable(const char *p)
{
	struct stat st;
	if (stat(p, &st) < 0)
		return errno ? errno : ENOENT;
	if (S_ISDIR(st.st_mode))
		return EISDIR;
	if (access(p, X_OK) < 0)
		return EACCES;
	return 0;
}

static char lookbuf[PATH_MAX * 2];

static int look_path(const char *name, char **env, const char **prog)
{
	if (strchr(name, '/')) {
		*prog = name;
		return check_executable(name);
	}
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	for (char **e = env; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	int denied = 0;
	for (const char *d = path;; d++) {
		const char *colon = strchr(d, ':');
		size_t dl = colon ? (size_t)(colon - d) : strlen(d);
		int n;
		if (dl == 0)
			n = snprintf(lookbuf, sizeof lookbuf, "%s", name);
		else
			n = snprintf(lookbuf, sizeof lookbuf, "%.*s/%s", (int)dl, d, name);
		if (n > 0 && (size_t)n < sizeof lookbuf) {
			int e = check_executable(lookbuf);
			if (e == 0) {
				*prog = lookbuf;
				return 0;
			}
			if (e == EACCES || e == EISDIR)
				denied = e;
		}
		if (!colon)
			break;
		d = colon;
	}
	return denied ? denied : ENOENT;
}

static void fail_start(unsigned long long id, const char *name, int e)
{
	char t[128], msg[PATH_MAX + 160];
	errtext(e, t, sizeof t);
	snprintf(msg, sizeof msg, "%s: %s", name, t);
	reply_failed(id, e == ENOENT ? "not-found" : "not-executable", e, msg);
}

static void oom_set(const char *v)
{
	if (oom_fd >= 0 && pwrite(oom_fd, v, strlen(v), 0) < 0) {
		/* as in Go: a failed toggle leaves the value where it was */
	}
}

static int open_pty(unsigned rows, unsigned cols, int *master, int *slave)
{
	int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -1;
	int unlock = 0;
	unsigned n;
	char name[32];
	if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || ioctl(m, TIOCGPTN, &n) < 0) {
		int e = errno;
		close(m);
		errno = e;
		return -1;
	}
	snprintf(name, sizeof name, "/dev/pts/%u", n);
	int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0) {
		int e = errno;
		close(m);
		errno = e;
		return -1;
	}
	if (rows > 0 && cols > 0) {
		struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
		(void)ioctl(s, TIOCSWINSZ, &ws);
	}
	*master = m;
	*slave = s;
	return 0;
}

static volatile int child_errno;

/* spawn forks (vfork: the child borrows our memory until it execs, so
 * nothing is copied) and execs one command. It returns its pid, or -1
 * with *err set when the fork or the exec failed; a child whose exec
 * failed is reaped here. */
static pid_t __attribute__((noinline)) spawn(const char *prog, struct request *rq, const int stdio[3], int *err)
{
	child_errno = 0;
	pid_t pid = vfork();
	if (pid == 0) {
		/* Only system calls here, and the write of child_errno. */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (setsid() < 0)
			goto fail;
		for (int i = 0; i < 3; i++)
			if (dup2(stdio[i], i) < 0)
				goto fail;
		if (rq->tty && ioctl(0, TIOCSCTTY, 0) < 0)
			goto fail;
		if (chdir(rq->dir) < 0)
			goto fail;
		execve(prog, rq->argv, rq->env);
	fail:
		child_errno = errno ? errno : EIO;
		_exit(127);
	}
	if (pid < 0) {
		*err = errno;
		return -1;
	}
	if (child_errno) {
		int ws;
		while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
			;
		*err = child_errno;
		return -1;
	}
	return pid;
}

static void start(struct request *rq, int *fds, int nfds)
{
	unsigned long long id = rq->id;
	struct stat st;
	if (rq->nargv == 0 || rq->argv[0][0] == '\0') {
		reply_failed(id, "bad-request", 0, "empty command");
		return;
	}
	if (!rq->dir || stat(rq->dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char msg[PATH_MAX + 64];
		snprintf(msg, sizeof msg, "working directory %s does not exist", rq->dir ? rq->dir : "");
		reply_failed(id, "bad-cwd", ENOTDIR, msg);
		return;
	}
	const char *prog;
	int e = look_path(rq->argv[0], rq->env, &prog);
	if (e) {
		fail_start(id, rq->argv[0], e);
		return;
	}
	int master = -1, slave = -1;
	int stdio[3];
	if (rq->tty) {
		if (open_pty(rq->rows, rq->cols, &master, &slave) < 0) {
			char t[128], msg[160];
			errtext(errno, t, sizeof t);
			snprintf(msg, sizeof msg, "terminal: %s", t);
			reply_failed(id, "io", 0, msg);
			return;
		}
		stdio[0] = stdio[1] = stdio[2] = slave;
	} else {
		if (nfds != 3) {
			char msg[64];
			snprintf(msg, sizeof msg, "exec needs 3 descriptors, got %d", nfds);
			reply_failed(id, "bad-request", 0, msg);
			return;
		}
		for (int i = 0; i < 3; i++)
			stdio[i] = fds[i];
	}
	/* Standard streams that would land on each other's numbers move up
	 * first; the duplicates are close-on-exec like everything pid 1
	 * holds. */
	for (int i = 0; i < 3; i++)
		if (stdio[i] < 3) {
			int d = fcntl(stdio[i], F_DUPFD_CLOEXEC, 3);
			if (d < 0) {
				char t[128];
				errtext(errno, t, sizeof t);
				reply_failed(id, "io", 0, t);
				goto out;
			}
			stdio[i] = d;
		}

	oom_set(oom_workload);
	int fork_errno = 0;
	pid_t pid = spawn(prog, rq, stdio, &fork_errno);
	oom_set(oom_own);
	if (pid > 0) {
		run_add(pid, id);
		reply_started(id, pid, master);
	} else if (fork_errno == EAGAIN || fork_errno == ENOMEM) {
		char t[128], msg[PATH_MAX + 200];
		errtext(fork_errno, t, sizeof t);
		snprintf(msg, sizeof msg, "%s: cannot start a process: the sandbox is at its process or memory limit (%s)", rq->argv[0], t);
		reply_failed(id, "no-resources", fork_errno, msg);
	} else {
		fail_start(id, rq->argv[0], fork_errno);
	}
out:
	for (int i = 0; i < 3; i++)
		if (stdio[i] >= 0 && stdio[i] != slave && (nfds != 3 || stdio[i] != fds[i]))
			close(stdio[i]);
	if (slave >= 0)
		close(slave);
	if (master >= 0)
		close(master);
}

static void signal_run(struct request *rq)
{
	struct run *r = run_by_id(rq->id);
	if (r && rq->has_signal)
		(void)kill(-r->pid, rq->sig);
}

/* reap collects every child, ours (reported) or orphans (reparented to
 * pid 1, dropped). */
static void reap(void)
{
	for (;;) {
		int ws;
		pid_t pid = waitpid(-1, &ws, WNOHANG);
		if (pid <= 0) {
			if (pid < 0 && errno == EINTR)
				continue;
			return;
		}
		struct run *r = run_by_pid(pid);
		if (r) {
			unsigned long long id = r->id;
			run_del(r);
			reply_exited(id, ws);
		}
	}
}

/* ---- handing over to the Go agent ---- */

static void keep_across_exec(int fd)
{
	if (fd >= 0)
		(void)fcntl(fd, F_SETFD, 0);
}

static void cloexec(int fd)
{
	if (fd >= 0)
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* hand_over executes the Go agent in our place; the request that made us
 * is still unread on the socket. It returns only when the execve failed. */
static int hand_over(void)
{
	size_t n = 6 + nruns;
	char **av = calloc(n + 1, sizeof *av);
	if (!av)
		return ENOMEM;
	char *buf = malloc(64 * (n + 1));
	if (!buf) {
		free(av);
		return ENOMEM;
	}
	size_t k = 0;
	char *w = buf;
#define ARG(...) (av[k++] = w, w += snprintf(w, 64, __VA_ARGS__) + 1)
	ARG("ironclaw-sandbox-resume");
	ARG("ctl=%d", ctl);
	ARG("steward=%d", self_fd);
	ARG("agent=%d", agent_fd);
	if (oom_fd >= 0)
		ARG("oom=%d:%s:%s", oom_fd, oom_own, oom_workload);
	for (size_t i = 0; i < nruns; i++)
		ARG("run=%d:%llu", runs[i].pid, runs[i].id);
#undef ARG
	av[k] = NULL;
	keep_across_exec(ctl);
	keep_across_exec(self_fd);
	keep_across_exec(agent_fd);
	keep_across_exec(oom_fd);
	extern char **environ;
	syscall(SYS_execveat, agent_fd, "", av, environ, AT_EMPTY_PATH);
	int e = errno;
	cloexec(ctl);
	cloexec(self_fd);
	cloexec(agent_fd);
	cloexec(oom_fd);
	free(buf);
	free(av);
	return e;
}

/* ---- start-up ---- */

static int parse_fd_arg(const char *a, const char *name, int *fd)
{
	size_t l = strlen(name);
	if (strncmp(a, name, l) != 0 || a[l] != '=')
		return 0;
	char *end;
	long v = strtol(a + l + 1, &end, 10);
	if (*end || v < 0 || v > INT_MAX)
		die("bad argument %s", a);
	*fd = (int)v;
	return 1;
}

static void copy_num(char *dst, size_t n, const char *s, size_t l)
{
	if (l == 0 || l >= n)
		die("bad oom_score_adj value");
	for (size_t i = 0; i < l; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (i == 0 && s[i] == '-')))
			die("bad oom_score_adj value");
	memcpy(dst, s, l);
	dst[l] = '\0';
}

static void parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (parse_fd_arg(a, "ctl", &ctl) || parse_fd_arg(a, "steward", &self_fd) || parse_fd_arg(a, "agent", &agent_fd))
			continue;
		if (strncmp(a, "oom=", 4) == 0) {
			char *end;
			long fd = strtol(a + 4, &end, 10);
			char *c2 = *end == ':' ? strchr(end + 1, ':') : NULL;
			if (!c2 || fd < 0 || fd > INT_MAX)
				die("bad argument %s", a);
			oom_fd = (int)fd;
			copy_num(oom_own, sizeof oom_own, end + 1, (size_t)(c2 - end - 1));
			copy_num(oom_workload, sizeof oom_workload, c2 + 1, strlen(c2 + 1));
			continue;
		}
		if (strncmp(a, "run=", 4) == 0) {
			char *end;
			long pid = strtol(a + 4, &end, 10);
			if (*end != ':' || pid <= 0 || pid > INT_MAX)
				die("bad argument %s", a);
			char *e2;
			errno = 0;
			unsigned long long id = strtoull(end + 1, &e2, 10);
			if (*e2 || errno)
				die("bad argument %s", a);
			run_add((int)pid, id);
			continue;
		}
		die("unknown argument %s", a);
	}
	if (ctl < 0 || self_fd < 0 || agent_fd < 0)
		die("ctl, steward and agent descriptors are required");
}

/* check_sealed refuses to serve unless this process is pid 1 and carries
 * the seal its init applied (the Go init, or setup.c before it serves):
 * run anywhere else it must do nothing. */
static void check_sealed(void)
{
	if (getpid() != 1)
		die("refused to run: not pid 1 of a sandbox (pid %d); only the IronClaw runtime starts this program", (int)getpid());
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		die("refused to run: cannot read /proc/self/status: %s", strerror(errno));
	char line[256];
	int nnp = 0, seccomp = 0, nocaps = 0;
	while (fgets(line, sizeof line, f)) {
		if (strcmp(line, "NoNewPrivs:\t1\n") == 0)
			nnp = 1;
		else if (strcmp(line, "Seccomp:\t2\n") == 0)
			seccomp = 1;
		else if (strncmp(line, "CapEff:\t", 8) == 0 && strcmp(line + 8, "0000000000000000\n") == 0)
			nocaps++;
		else if (strncmp(line, "CapPrm:\t", 8) == 0 && strcmp(line + 8, "0000000000000000\n") == 0)
			nocaps++;
		else if (strncmp(line, "CapBnd:\t", 8) == 0 && strcmp(line + 8, "0000000000000000\n") == 0)
			nocaps++;
		else if (strncmp(line, "CapInh:\t", 8) == 0 && strcmp(line + 8, "0000000000000000\n") == 0)
			nocaps++;
		else if (strncmp(line, "CapAmb:\t", 8) == 0 && strcmp(line + 8, "0000000000000000\n") == 0)
			nocaps++;
	}
	fclose(f);
	if (!nnp || !seccomp || nocaps != 5)
		die("refused to run: this process is not sealed (no_new_privs, seccomp, no capabilities)");
	int type = 0;
	socklen_t tl = sizeof type;
	if (getsockopt(ctl, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET)
		die("refused to run: descriptor %d is not the runtime's control socket", ctl);
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--protocol") == 0) {
		puts(marker);
		return 0;
	}
	if (argc >= 1 && strcmp(argv[0], INIT_ARG0) == 0)
		init_sandbox(); /* setup.c: build, seal, report ready */
	else
		parse_args(argc, argv);
	/* An execve makes us dumpable again: same-uid commands must not read
	 * our memory or take our descriptors. No command exists yet that
	 * could have raced this (the ones handed over are our children, not
	 * tracers: seccomp refuses ptrace). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		die("dumpable: %s", strerror(errno));
	check_sealed();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		die("pdeathsig: %s", strerror(errno));
	cloexec(ctl);
	cloexec(self_fd);
	cloexec(agent_fd);
	cloexec(oom_fd);
	/* The Go agent left the socket non-blocking (its poller's mode, shared
	 * with the file description); this program waits in poll and send. */
	int fl = fcntl(ctl, F_GETFL);
	if (fl >= 0)
		(void)fcntl(ctl, F_SETFL, fl & ~O_NONBLOCK);

	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
		die("sigprocmask: %s", strerror(errno));
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		die("signalfd: %s", strerror(errno));
	/* Commands handed over may have exited while nobody watched. */
	reap();

	static int fds[MAX_FDS];
	static char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	for (;;) {
		struct pollfd pf[2] = {{.fd = ctl, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		if (pf[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				;
			reap();
		}
		if (!pf[0].revents)
			continue;
		/* Peek first: a request for the Go agent stays on the socket. */
		ssize_t n = recv(ctl, pkt, sizeof pkt, MSG_PEEK | MSG_TRUNC);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			exit(0);
		}
		if (n == 0 && (pf[0].revents & (POLLHUP | POLLERR)))
			exit(0); /* the daemon hung up */
		struct request rq;
		int mine = n > 0 && (size_t)n <= MAX_PACKET && parse_request(pkt, (size_t)n, &rq) == 0 &&
			   ((strcmp(rq.op, "exec") == 0 && !(rq.gate && rq.gate[0])) || strcmp(rq.op, "signal") == 0);
		if (!mine) {
			int e = hand_over();
			/* Still here: the Go agent could not start. The request is
			 * answered as failed rather than left to block the socket. */
			struct iovec iov = {.iov_base = pkt, .iov_len = sizeof pkt};
			struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
			ssize_t got = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
				if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
					for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
						int fd;
						memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
						close(fd);
					}
			if (got > 0 && (size_t)got <= MAX_PACKET && parse_request(pkt, (size_t)got, &rq) == 0) {
				char t[128], msg[256];
				errtext(e, t, sizeof t);
				snprintf(msg, sizeof msg, "pid 1 cannot serve a %s request: the in-sandbox agent did not start: %s", rq.op, t);
				reply_failed(rq.id, "io", 0, msg);
			}
			continue;
		}
		/* Ours: read it for real, with its descriptors. */
		struct iovec iov = {.iov_base = pkt, .iov_len = sizeof pkt};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		ssize_t got = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
		if (got <= 0)
			exit(0);
		int nfds = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
					int fd;
					memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
					if (nfds < MAX_FDS)
						fds[nfds++] = fd;
					else
						close(fd);
				}
		if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || got != n || parse_request(pkt, (size_t)got, &rq) < 0) {
			/* cannot happen: the packet was the one we peeked */
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			exit(1);
		}
		if (strcmp(rq.op, "exec") == 0)
			start(&rq, fds, nfds);
		else
			signal_run(&rq);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
	}
}
