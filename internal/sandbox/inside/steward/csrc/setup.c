/*
 * The steward as a sandbox's init: it builds the sandbox's root and seals
 * itself by executing the plan the daemon compiled (package setup, whose
 * Op constants and Encode this file follows), then serves as pid 1
 * (steward.c). The Go init executes the same plan, so the two cannot
 * build different sandboxes; this one starts without a Go runtime and is
 * one thread throughout, so each seal call is made once.
 *
 * Run by mistake outside its namespaces, as root, the mount steps would
 * shadow the host's own directories: init_sandbox refuses to do anything
 * unless it is pid 1 of a fresh pid namespace inside a user namespace that
 * does not map host root, with the runtime's control socket at 3.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "steward.h"

/* package setup's Magic and Ops */
#define PLAN_MAGIC "ironclaw-setup 1\n"
#define FLAG_WORKLOAD_TASKS 1u
#define FLAG_WORKLOAD_REQUIRED 2u

enum {
	OP_UNSHARE_CGROUP = 1,
	OP_PRIVATE,
	OP_OPEN,
	OP_ROOT,
	OP_MKDIR,
	OP_MKDIR_ALL,
	OP_WRITE_FILE,
	OP_SYMLINK,
	OP_BIND,
	OP_MOUNT,
	OP_FREEZE,
	OP_MASK,
	OP_GATE,
	OP_PIVOT,
	OP_HOSTNAME,
	OP_LOOPBACK,
	OP_CPUS,
	OP_OOM,
	OP_LISTEN,
	OP_RMDIR,

	OP_RLIMIT = 64,
	OP_IDENTITY,
	OP_LANDLOCK,
	OP_LANDLOCK_PATH,
	OP_LANDLOCK_PORT,
	OP_LANDLOCK_EXEC,
	OP_SECCOMP,
};

/* The kernel's, spelled out so that older headers build this file. */
#define X_MOUNT_ATTR_RDONLY 0x1
#define X_MOUNT_ATTR_NOSUID 0x2
#define X_MOUNT_ATTR_NODEV 0x4
#define X_MOUNT_ATTR_NOEXEC 0x8
#define X_AT_RECURSIVE 0x8000
#define X_MOVE_MOUNT_F_EMPTY_PATH 0x4
#define X_CLOSE_RANGE_CLOEXEC 4
#define X_RULE_PATH_BENEATH 1
#define X_RULE_NET_PORT 2

struct x_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};
struct x_ruleset_attr {
	uint64_t fs, net, scoped;
};
struct x_path_beneath {
	uint64_t allowed;
	int32_t parent_fd;
} __attribute__((packed));
struct x_net_port {
	uint64_t allowed, port;
};

struct step {
	unsigned op;
	int32_t slot;
	uint32_t mode;
	uint64_t flags, attr;
	const char *path, *source, *fstype, *data;
	uint32_t datalen;
};

/* The set-up's state. */
static const char *root = ""; /* where the root is assembled; "" once it is "/" */
static int slots[MAX_FDS + 256];
static int nslots, ntrees;
static int listeners[MAX_FDS];
static int nlisteners;
static int ruleset = -1;
static char pathbuf[PATH_MAX], pathbuf2[PATH_MAX];

/* fail reports a set-up failure to the daemon (a "failed" reply, as the Go
 * init's) and ends this process, and with it the sandbox. */
static void __attribute__((noreturn, format(printf, 2, 3))) fail(int e, const char *fmt, ...)
{
	char msg[1024], t[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (e && n >= 0 && (size_t)n < sizeof msg) {
		errtext(e, t, sizeof t);
		snprintf(msg + n, sizeof msg - (size_t)n, ": %s", t);
	}
	reply_failed(0, "io", e, msg);
	exit(1);
}

/* at is p in the root being assembled. */
static const char *at(const char *p, char *buf)
{
	if (snprintf(buf, PATH_MAX, "%s%s", root, p) >= PATH_MAX)
		fail(ENAMETOOLONG, "root %s", p);
	return buf;
}

/* ---- the plan ---- */

struct reader {
	const char *p, *end;
};

static int read_u32(struct reader *r, uint32_t *v)
{
	if (r->end - r->p < 4)
		return -1;
	memcpy(v, r->p, 4);
	r->p += 4;
	return 0;
}

static int read_u64(struct reader *r, uint64_t *v)
{
	if (r->end - r->p < 8)
		return -1;
	memcpy(v, r->p, 8);
	r->p += 8;
	return 0;
}

/* read_str points *s at a string of the plan, NUL-terminated there;
 * a name (not data) may hold no NUL of its own. */
static int read_str(struct reader *r, const char **s, uint32_t *len, int name)
{
	uint32_t n;
	if (read_u32(r, &n) < 0 || (size_t)(r->end - r->p) < (size_t)n + 1 || r->p[n] != '\0')
		return -1;
	if (name && memchr(r->p, '\0', n))
		return -1;
	*s = r->p;
	if (len)
		*len = n;
	r->p += n + 1;
	return 0;
}

static int read_step(struct reader *r, struct step *s)
{
	uint32_t slot;
	/* the op, then three zero bytes */
	if (r->end - r->p < 4 || r->p[1] || r->p[2] || r->p[3])
		return -1;
	s->op = (unsigned char)r->p[0];
	r->p += 4;
	if (read_u32(r, &slot) < 0 || read_u32(r, &s->mode) < 0 || read_u64(r, &s->flags) < 0 || read_u64(r, &s->attr) < 0)
		return -1;
	s->slot = (int32_t)slot;
	if (read_str(r, &s->path, NULL, 1) < 0 || read_str(r, &s->source, NULL, 1) < 0 || read_str(r, &s->fstype, NULL, 1) < 0 ||
	    read_str(r, &s->data, &s->datalen, 0) < 0)
		return -1;
	return 0;
}

/* ---- the root ---- */

static int mkdir_all(const char *p, mode_t mode)
{
	struct stat st;
	if (stat(p, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	char b[PATH_MAX];
	size_t n = strlen(p);
	if (n >= sizeof b)
		return ENAMETOOLONG;
	memcpy(b, p, n + 1);
	for (char *q = b + 1; *q; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		if (mkdir(b, mode) < 0 && errno != EEXIST)
			return errno;
		*q = '/';
	}
	if (mkdir(b, mode) < 0 && errno != EEXIST)
		return errno;
	return 0;
}

/* set_mount_attr adds attr to the mount at p and every mount below it.
 * Before 5.12 a remount of the top mount repeats the flags the user
 * namespace has locked, or the kernel refuses it (as boot's setMountAttr). */
static void set_mount_attr(const char *p, uint64_t attr)
{
	struct x_mount_attr ma = {.attr_set = attr};
	if (syscall(SYS_mount_setattr, -1, p, X_AT_RECURSIVE, &ma, sizeof ma) == 0)
		return;
	if (errno != ENOSYS)
		fail(errno, "mount_setattr %s", p);
	struct statvfs sv;
	if (statvfs(p, &sv) < 0)
		fail(errno, "statfs %s", p);
	unsigned long flags = MS_BIND | MS_REMOUNT;
	if (sv.f_flag & ST_NOSUID)
		flags |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		flags |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		flags |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		flags |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		flags |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		flags |= MS_RELATIME;
	if (sv.f_flag & ST_RDONLY)
		flags |= MS_RDONLY;
	if (attr & X_MOUNT_ATTR_NOSUID)
		flags |= MS_NOSUID;
	if (attr & X_MOUNT_ATTR_NODEV)
		flags |= MS_NODEV;
	if (attr & X_MOUNT_ATTR_RDONLY)
		flags |= MS_RDONLY;
	if (mount("", p, "", flags, NULL) < 0)
		fail(errno, "remount %s", p);
}

static void bind_source(const struct step *s)
{
	if (s->slot < 0 || s->slot >= nslots)
		fail(0, "bind %s: no source %d", s->path, (int)s->slot);
	int fd = slots[s->slot];
	const char *dst = at(s->path, pathbuf);
	struct stat st;
	if (fstat(fd, &st) < 0)
		fail(errno, "root %s", s->path);
	int e;
	if (S_ISDIR(st.st_mode)) {
		if ((e = mkdir_all(dst, 0755)))
			fail(e, "root %s", s->path);
	} else {
		snprintf(pathbuf2, sizeof pathbuf2, "%s", dst);
		char *slash = strrchr(pathbuf2, '/');
		if (slash && slash != pathbuf2) {
			*slash = '\0';
			if ((e = mkdir_all(pathbuf2, 0755)))
				fail(e, "root %s", s->path);
		}
		int f = open(dst, O_CREAT | O_RDONLY | O_CLOEXEC, 0644);
		if (f < 0)
			fail(errno, "root %s", s->path);
		close(f);
	}
	if (s->slot < ntrees) {
		if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, X_MOVE_MOUNT_F_EMPTY_PATH) < 0)
			fail(errno, "root %s: attach mount", s->path);
	} else {
		char src[32];
		snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
		if (mount(src, dst, "", MS_BIND | MS_REC, NULL) < 0)
			fail(errno, "root %s: bind", s->path);
	}
	set_mount_attr(dst, s->attr);
}

static void freeze(const char *q)
{
	const char *p = at(q, pathbuf);
	struct stat st;
	if (lstat(p, &st) < 0)
		return;
	if (mount(p, p, "", MS_BIND | MS_REC, NULL) < 0)
		fail(errno, "bind %s", q);
	set_mount_attr(p, X_MOUNT_ATTR_RDONLY | X_MOUNT_ATTR_NOSUID | X_MOUNT_ATTR_NODEV | X_MOUNT_ATTR_NOEXEC);
}

/* Hides q where the root has it: a directory under a read-only bind of
 * the empty directory empty ("": an empty read-only tmpfs), anything else
 * under the root's /dev/null. */
static void mask(const char *q, const char *empty)
{
	const char *p = at(q, pathbuf);
	struct stat st;
	if (lstat(p, &st) < 0)
		return;
	if (S_ISDIR(st.st_mode) && !*empty) {
		if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555") < 0)
			fail(errno, "mask %s", q);
		return;
	}
	/* /dev/null keeps working as the device it is: no nodev on its bind */
	int dir = S_ISDIR(st.st_mode);
	const char *src = at(dir ? empty : "/dev/null", pathbuf2);
	if (mount(src, p, "", MS_BIND, NULL) < 0)
		fail(errno, "mask %s", q);
	set_mount_attr(p, X_MOUNT_ATTR_RDONLY | X_MOUNT_ATTR_NOSUID | X_MOUNT_ATTR_NOEXEC | (dir ? X_MOUNT_ATTR_NODEV : 0));
}

static void pivot(void)
{
	if (chdir(root) < 0)
		fail(errno, "chdir %s", root);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		fail(errno, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		fail(errno, "detach old root");
	if (chdir("/") < 0)
		fail(errno, "chdir /");
	root = "";
}

static void loopback_up(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fail(errno, "lo");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		fail(errno, "lo flags");
	ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP);
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		fail(errno, "lo up");
	close(fd);
}

static void pin_cpus(const char *list)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	const char *p = list;
	for (;;) {
		char *end;
		errno = 0;
		unsigned long c = strtoul(p, &end, 10);
		if (end == p || errno || c >= CPU_SETSIZE || (*end != ',' && *end != '\0'))
			fail(0, "CPU affinity %s: bad CPU list", list);
		CPU_SET(c, &set);
		if (*end == '\0')
			break;
		p = end + 1;
	}
	if (sched_setaffinity(0, sizeof set, &set) < 0)
		fail(errno, "CPU affinity %s", list);
}

/* open_oom prepares for commands to start at oom_score_adj workload (see
 * boot's openOOMAdj): raising one's own needs no privilege, and going
 * back down as far as where pid 1 started is allowed. */
static void open_oom(long long workload)
{
	int fd = open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fail(errno, "oom_score_adj");
	char b[16];
	ssize_t n = read(fd, b, sizeof b - 1);
	if (n <= 0)
		fail(n < 0 ? errno : EIO, "oom_score_adj");
	b[n] = '\0';
	char *end;
	long own = strtol(b, &end, 10);
	if (end == b || (*end != '\n' && *end != '\0'))
		fail(0, "oom_score_adj: %s", b);
	if (own >= workload) {
		close(fd); /* nothing to gain */
		return;
	}
	if (own < -1000 || workload > 1000)
		fail(0, "oom_score_adj %ld -> %lld: out of range", own, workload);
	oom_fd = fd;
	snprintf(oom_own, sizeof oom_own, "%d", (int)own);
	snprintf(oom_workload, sizeof oom_workload, "%d", (int)workload);
}

static void listen_on(uint64_t port)
{
	if (port == 0 || port > 65535 || nlisteners == MAX_FDS)
		fail(0, "exposed port %llu: out of range", (unsigned long long)port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fail(errno, "exposed port %llu", (unsigned long long)port);
	int one = 1;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		fail(errno, "exposed port %llu: bind", (unsigned long long)port);
	if (listen(fd, 256) < 0)
		fail(errno, "exposed port %llu: listen", (unsigned long long)port);
	listeners[nlisteners++] = fd;
}

/* ---- the seal (the order is the plan's: boot's applySeal) ---- */

static void identity(uid_t uid, gid_t gid)
{
	FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
	int last = -1;
	if (!f || fscanf(f, "%d", &last) != 1 || last < 0 || last > 63)
		fail(f ? 0 : errno, "cap_last_cap");
	fclose(f);
	/* the bounding set needs CAP_SETPCAP: before the uid change */
	for (int c = 0; c <= last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
			fail(errno, "drop capability %d from the bounding set", c);
	if (getuid() != uid || getgid() != gid) {
		if (setgroups(0, NULL) < 0)
			fail(errno, "setgroups");
		if (setresgid(gid, gid, gid) < 0)
			fail(errno, "setresgid");
		if (setresuid(uid, uid, uid) < 0)
			fail(errno, "setresuid");
	}
	/* Permitted, effective and inheritable, emptied; the ambient set goes
	 * with them. */
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail(errno, "capset");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail(errno, "no_new_privs");
	/* A uid change resets these two. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fail(errno, "dumpable");
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		fail(errno, "pdeathsig");
}

static void landlock_fd_rule(int fd, uint64_t dir, uint64_t file, const char *what)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		fail(errno, "landlock: %s rule: stat", what);
	uint64_t grant = S_ISDIR(st.st_mode) ? dir : file;
	if (grant == 0)
		return; /* the kernel rejects an empty grant */
	struct x_path_beneath pb = {.allowed = grant, .parent_fd = fd};
	if (syscall(SYS_landlock_add_rule, ruleset, X_RULE_PATH_BENEATH, &pb, 0) < 0)
		fail(errno, "landlock: %s rule (access %#llx)", what, (unsigned long long)grant);
}

static void landlock_path(const struct step *s)
{
	int fd = open(s->path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return; /* skipped, as the Go init skips it */
		fail(errno, "landlock: rule for %s: open", s->path);
	}
	landlock_fd_rule(fd, s->flags, s->attr, s->path);
	close(fd);
}

static void install_seccomp(const struct step *s)
{
	if (s->datalen == 0 || s->datalen % sizeof(struct sock_filter) || s->datalen / sizeof(struct sock_filter) > BPF_MAXINSNS)
		fail(0, "seccomp: a program of %u bytes", s->datalen);
	struct sock_filter *prog = malloc(s->datalen);
	if (!prog)
		fail(ENOMEM, "seccomp");
	memcpy(prog, s->data, s->datalen);
	struct sock_fprog fp = {.len = (unsigned short)(s->datalen / sizeof *prog), .filter = prog};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) < 0)
		fail(errno, "seccomp: install filter (%u instructions)", (unsigned)fp.len);
	free(prog);
}

static void do_step(const struct step *s)
{
	int e;
	switch (s->op) {
	case OP_UNSHARE_CGROUP:
		if (unshare(CLONE_NEWCGROUP) < 0)
			fail(errno, "cgroup namespace");
		break;
	case OP_PRIVATE:
		if (mount("", "/", "", MS_REC | MS_PRIVATE, NULL) < 0)
			fail(errno, "make / private");
		break;
	case OP_OPEN: {
		if (nslots == (int)(sizeof slots / sizeof slots[0]))
			fail(0, "open %s: too many sources", s->path);
		int fd = open(s->path, O_PATH | O_CLOEXEC);
		if (fd < 0)
			fail(errno, "open %s", s->path);
		slots[nslots++] = fd;
		break;
	}
	case OP_ROOT:
		if (s->path[0] != '/')
			fail(0, "root %s: not absolute", s->path);
		if (mount("tmpfs", s->path, "tmpfs", MS_NOSUID | MS_NODEV, s->data) < 0)
			fail(errno, "root tmpfs");
		root = s->path;
		break;
	case OP_MKDIR:
		if (mkdir(at(s->path, pathbuf), s->mode) < 0)
			fail(errno, "root %s", s->path);
		break;
	case OP_MKDIR_ALL:
		if ((e = mkdir_all(at(s->path, pathbuf), s->mode)))
			fail(e, "root %s", s->path);
		break;
	case OP_WRITE_FILE: {
		int fd = open(at(s->path, pathbuf), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, s->mode);
		if (fd < 0)
			fail(errno, "root %s", s->path);
		for (uint32_t off = 0; off < s->datalen;) {
			ssize_t n = write(fd, s->data + off, s->datalen - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				fail(n < 0 ? errno : EIO, "root %s", s->path);
			off += (uint32_t)n;
		}
		close(fd);
		break;
	}
	case OP_SYMLINK:
		if (symlink(s->source, at(s->path, pathbuf)) < 0)
			fail(errno, "root %s", s->path);
		break;
	case OP_BIND:
		bind_source(s);
		break;
	case OP_MOUNT:
		if (mount(s->source, at(s->path, pathbuf), s->fstype, (unsigned long)s->flags, s->data[0] ? s->data : NULL) < 0)
			fail(errno, "mount %s on %s", s->fstype, s->path);
		break;
	case OP_FREEZE:
		freeze(s->path);
		break;
	case OP_MASK:
		mask(s->path, s->source);
		break;
	case OP_RMDIR:
		if (rmdir(at(s->path, pathbuf)) < 0)
			fail(errno, "root %s", s->path);
		break;
	case OP_PIVOT:
		pivot();
		break;
	case OP_HOSTNAME:
		if (sethostname(s->data, s->datalen) < 0)
			fail(errno, "hostname");
		break;
	case OP_LOOPBACK:
		loopback_up();
		break;
	case OP_CPUS:
		pin_cpus(s->data);
		break;
	case OP_OOM:
		open_oom((long long)(int64_t)s->flags);
		break;
	case OP_LISTEN:
		listen_on(s->flags);
		break;
	case OP_RLIMIT: {
		struct rlimit rl = {.rlim_cur = s->flags, .rlim_max = s->flags};
		if (setrlimit(s->slot, &rl) < 0)
			fail(errno, "rlimit %d", (int)s->slot);
		break;
	}
	case OP_IDENTITY:
		if (s->flags > UINT32_MAX - 1 || s->attr > UINT32_MAX - 1)
			fail(0, "bad identity");
		identity((uid_t)s->flags, (gid_t)s->attr);
		break;
	case OP_LANDLOCK: {
		struct x_ruleset_attr ra = {.fs = s->flags, .net = s->attr, .scoped = s->mode};
		if (s->slot <= 0 || (size_t)s->slot > sizeof ra)
			fail(0, "landlock: a ruleset of %d bytes", (int)s->slot);
		ruleset = (int)syscall(SYS_landlock_create_ruleset, &ra, (size_t)s->slot, 0);
		if (ruleset < 0)
			fail(errno, "landlock: create ruleset");
		break;
	}
	case OP_LANDLOCK_PATH:
		if (ruleset < 0)
			fail(0, "landlock: a rule before the ruleset");
		landlock_path(s);
		break;
	case OP_LANDLOCK_PORT: {
		if (ruleset < 0)
			fail(0, "landlock: a rule before the ruleset");
		struct x_net_port np = {.allowed = s->attr, .port = s->flags};
		if (syscall(SYS_landlock_add_rule, ruleset, X_RULE_NET_PORT, &np, 0) < 0)
			fail(errno, "landlock: tcp rule for port %llu", (unsigned long long)s->flags);
		break;
	}
	case OP_LANDLOCK_EXEC:
		if (ruleset < 0)
			fail(0, "landlock: a rule before the ruleset");
		landlock_fd_rule(self_fd, 0, s->flags, "read-exec (the steward)");
		landlock_fd_rule(agent_fd, 0, s->flags, "read-exec (the Go agent)");
		if (syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
			fail(errno, "landlock: restrict");
		close(ruleset);
		ruleset = -1;
		break;
	case OP_SECCOMP:
		install_seccomp(s);
		break;
	case OP_GATE:
		fail(0, "gated programs need the Go init");
	default:
		fail(0, "set-up step %u: not known to this init", s->op);
	}
}

/* ---- start ---- */

/* read_uid_map refuses a uid map that maps host root and returns how many
 * lines it has; *maps_zero says whether one of them maps uid 0 here. */
static int read_uid_map(int *maps_zero)
{
	FILE *f = fopen("/proc/self/uid_map", "re");
	if (!f)
		die("refused to run: cannot read uid_map: %s", strerror(errno));
	unsigned long in, out, count;
	int lines = 0;
	*maps_zero = 0;
	while (fscanf(f, "%lu %lu %lu", &in, &out, &count) == 3) {
		lines++;
		if (out == 0)
			die("refused to run: the user namespace maps host root; refusing");
		if (in == 0)
			*maps_zero = 1;
	}
	fclose(f);
	return lines;
}

/* check_fresh_namespaces refuses to go on unless this is pid 1 of a new
 * pid namespace, in a user namespace that maps nothing to host root, with
 * the control socket at ctl; it changes nothing (boot's
 * checkFreshNamespaces). The daemon writes the id maps only once this
 * program has started (the native backend's idmap.go), so they may be
 * missing yet: check_user_namespace requires them once the plan is in. */
static void check_fresh_namespaces(void)
{
	if (getpid() != 1)
		die("refused to run: not pid 1 of a new pid namespace (pid %d); this entry is started only by the IronClaw runtime", (int)getpid());
	int maps_zero;
	(void)read_uid_map(&maps_zero);
	int type = 0;
	socklen_t tl = sizeof type;
	if (getsockopt(ctl, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET)
		die("refused to run: descriptor %d is not the runtime's control socket", ctl);
}

/* check_user_namespace, once the plan has come (the daemon writes the
 * maps before it sends it), refuses an empty uid map and, where uid 0 is
 * mapped (root mode), makes this process uid and gid 0 of the namespace:
 * it executed before the maps existed, as no uid of it, and the root it
 * builds must be made by a uid the namespace knows (boot's
 * checkUserNamespace). */
static void check_user_namespace(void)
{
	int maps_zero;
	if (read_uid_map(&maps_zero) == 0)
		die("refused to run: an empty uid_map");
	if (!maps_zero || getuid() == 0)
		return;
	if (setgroups(0, NULL) < 0)
		fail(errno, "setgroups");
	if (setresgid(0, 0, 0) < 0)
		fail(errno, "setresgid");
	if (setresuid(0, 0, 0) < 0)
		fail(errno, "setresuid");
}

/* default_signals gives every signal its default disposition and
 * unblocks all: what the daemon's process left ignored or blocked (a
 * runtime's internal signals among them) would otherwise reach every
 * command, which inherits both across execve. The raw calls reach the
 * signals glibc keeps for itself (32, 33). */
static void default_signals(void)
{
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} dfl = {.handler = SIG_DFL};
	for (int s = 1; s <= 64; s++)
		if (s != SIGKILL && s != SIGSTOP)
			(void)syscall(SYS_rt_sigaction, s, &dfl, NULL, sizeof dfl.mask);
	uint64_t none = 0;
	(void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
}

void init_sandbox(void)
{
	ctl = 3;
	check_fresh_namespaces();
	default_signals();
	/* Whatever the runtime's parent leaked to us must not reach commands. */
	(void)syscall(SYS_close_range, 4u, ~0u, X_CLOSE_RANGE_CLOEXEC);

	/* This program, for the Go agent to hand pid 1 back to, opened while
	 * /proc/self/exe still leads to it. */
	self_fd = open("/proc/self/exe", O_PATH | O_CLOEXEC);
	if (self_fd < 0)
		die("open /proc/self/exe: %s", strerror(errno));

	static char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	struct iovec iov = {.iov_base = pkt, .iov_len = sizeof pkt};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t got;
	while ((got = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (got <= 0)
		exit(1); /* the daemon gave up */
	check_user_namespace();
	int fds[MAX_FDS], nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfds < MAX_FDS; i++)
				memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		fail(0, "the plan or its descriptors were truncated");

	struct reader r = {.p = pkt, .end = pkt + got};
	uint32_t trees, flags, nsteps;
	size_t ml = sizeof PLAN_MAGIC - 1;
	if ((size_t)got < ml || memcmp(pkt, PLAN_MAGIC, ml) != 0)
		fail(0, "the daemon sent no plan this init reads (want %.16s)", PLAN_MAGIC);
	r.p += ml;
	if (read_u32(&r, &trees) < 0 || read_u32(&r, &flags) < 0 || read_u32(&r, &nsteps) < 0)
		fail(0, "a short plan");
	int want = (int)trees + 1 + ((flags & FLAG_WORKLOAD_TASKS) ? 1 : 0);
	if (trees > MAX_FDS || nfds != want)
		fail(0, "the plan came with %d descriptors, not %d", nfds, want);
	ntrees = nslots = (int)trees;
	memcpy(slots, fds, sizeof(int) * trees);
	agent_fd = fds[trees];
	int workload_tasks = (flags & FLAG_WORKLOAD_TASKS) ? fds[trees + 1] : -1;

	for (uint32_t i = 0; i < nsteps; i++) {
		struct step s;
		if (read_step(&r, &s) < 0)
			fail(0, "step %u of the plan is malformed", i);
		do_step(&s);
	}
	if (r.p != r.end)
		fail(0, "%zu bytes after the plan's last step", (size_t)(r.end - r.p));
	for (int i = 0; i < nslots; i++)
		close(slots[i]);
	if (workload_tasks >= 0) {
		/* Moves this (the only, forking) thread into the pids cgroup's
		 * workload child; a refusal is the daemon's to notice, unless a
		 * command is already queued behind the plan: then nothing may
		 * start before the daemon has moved us, and this init gives up
		 * (the daemon builds the sandbox again without queueing). */
		if (write(workload_tasks, "0", 1) != 1 && (flags & FLAG_WORKLOAD_REQUIRED)) {
			int e = errno;
			reply_failed(0, "workload", e, "pid 1 could not enter its workload's pids share");
			exit(1);
		}
		close(workload_tasks);
	}
	static const char ready[] = "{\"op\":\"ready\",\"id\":0}";
	send_packet(ready, sizeof ready - 1, listeners, nlisteners);
	for (int i = 0; i < nlisteners; i++)
		close(listeners[i]);
}
