// The sandbox agent: the PID 1 of every session's sandbox, started as
//
//	warden agent [--exec-allow PATHS] [--writable PATHS] [--exec-dirs PATHS] [--hidden-programs FILE] [--pooled]
//	warden agent --gvisor --listen PATH [--rlimits ...]
//
// It runs from a constructor and never returns to Go: one thread, a few
// hundred KiB, where a Go runtime held over 2 MiB and nine threads (each
// counted against the sandbox's pids limit) in every warm container.
//
// It applies Landlock as a second wall (landlock.c), reaps every zombie,
// and runs each command it is sent over the listening socket on fd 3
// (runtime/sandbox/agentwire.go: one JSON message per SOCK_SEQPACKET packet, the
// caller's stdin, stdout and stderr as SCM_RIGHTS) in a session of its
// own, so its whole process group can be signalled. One epoll loop serves
// the listener, every connection, and a signalfd for SIGCHLD.
//
// Under gVisor (--gvisor) there is no Landlock and no listener to
// inherit: the agent binds its socket at --listen, on a folder the host
// shares (runsc --host-uds=create makes it reachable from the host), and
// removes that name as soon as the first connection comes, which can only
// be the host's (the agent has started nothing yet): the host reaches the
// socket through a link of its own, and nothing in the sandbox finds it.
// gVisor's file view, not Landlock, holds exec.allow there.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <linux/capability.h>
#include <sys/signalfd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "fastexec.h"
#include "landlock.h"
#include "leftover.h"

#define LISTENER_FD 3 /* runtime.agentListenerFD */

/* ---- string lists --------------------------------------------------- */

void strings_add(struct strings *s, const char *v)
{
	if (s->failed)
		return;
	if (s->n + 2 > s->cap) {
		int cap = s->cap ? s->cap * 2 : 8;
		char **p = realloc(s->v, (size_t)cap * sizeof *p);
		if (!p) {
			s->failed = 1;
			return;
		}
		s->v = p;
		s->cap = cap;
	}
	if (!(s->v[s->n] = strdup(v))) {
		s->failed = 1;
		return;
	}
	s->v[++s->n] = NULL; /* argv and envp want the NULL */
}

void strings_free(struct strings *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	*s = (struct strings){0};
}

/* split_on adds the parts of v separated by sep. */
static void split_on(struct strings *s, const char *v, int sep)
{
	while (*v) {
		const char *c = strchrnul(v, sep);
		char *part = strndup(v, (size_t)(c - v));
		if (!part) {
			s->failed = 1;
			return;
		}
		strings_add(s, part);
		free(part);
		v = *c ? c + 1 : c;
	}
}

/* split adds the colon-separated parts of v. */
static void split(struct strings *s, const char *v) { split_on(s, v, ':'); }

/* ---- the protocol's messages ---------------------------------------- */

/* read_text reads a JSON string (or null, which leaves "") into *out. */
static int read_text(const char *v, const char *end, char **out, int *nul)
{
	struct buf b = {0};
	buf_put(&b, "", 0);
	if (!json_literal(v, end, "null") && !json_read_string(v, end, &b)) {
		free(b.p);
		return -1;
	}
	if (b.failed)
		return -1;
	if (strlen(b.p) != b.len)
		*nul = 1;
	free(*out);
	*out = b.p;
	return 0;
}

static int read_list(const char *v, const char *end, struct strings *s, int *nul)
{
	strings_free(s);
	if (json_literal(v, end, "null"))
		return 0;
	if (v >= end || *v != '[')
		return -1;
	/* [] is a list, empty; null is none: v is set for the former */
	if (!(s->v = calloc(1, sizeof *s->v)))
		return -1;
	s->cap = 1;
	const char *p = json_skip_ws(v + 1, end);
	if (p < end && *p == ']')
		return 0;
	for (;;) {
		char *item = NULL;
		p = json_skip_ws(p, end);
		if (read_text(p, end, &item, nul))
			return -1;
		strings_add(s, item);
		free(item);
		if (s->failed)
			return -1;
		p = json_skip_ws(json_skip_value(p, end, 1), end);
		if (!p || p >= end)
			return -1;
		if (*p == ']')
			return 0;
		if (*p++ != ',')
			return -1;
	}
}

static int read_bool(const char *v, const char *end, int *out)
{
	if (json_literal(v, end, "null"))
		return 0;
	if (json_literal(v, end, "true"))
		*out = 1;
	else if (json_literal(v, end, "false"))
		*out = 0;
	else
		return -1;
	return 0;
}

/* read_int reads an integer as Go decodes one into an integer field: a
 * number that is not whole, or out of [min, max], is an error. */
static int read_int(const char *v, const char *end, long long min, long long max, long long *out)
{
	if (json_literal(v, end, "null"))
		return 0;
	const char *after = json_skip_value(v, end, 1);
	if (!after || v >= end || !(*v == '-' || (*v >= '0' && *v <= '9')))
		return -1;
	int neg = *v == '-';
	if (neg && min == 0)
		return -1; /* Go's ParseUint takes no sign, not even "-0" */
	unsigned long long n = 0, limit = neg ? (unsigned long long)(-(min + 1)) + 1 : (unsigned long long)max;
	for (const char *p = v + neg; p < after; p++) {
		if (*p < '0' || *p > '9')
			return -1; /* a fraction or an exponent */
		unsigned d = (unsigned)(*p - '0');
		if (n > (limit - d) / 10)
			return -1;
		n = n * 10 + d;
	}
	*out = neg ? (long long)(0 - n) : (long long)n;
	return 0;
}

static int request_member(void *ctx, const char *key, const char *v, const char *end)
{
	struct request *r = ctx;
	long long n;
	if (!strcmp(key, "argv"))
		return read_list(v, end, &r->argv, &r->nul);
	if (!strcmp(key, "env"))
		return read_list(v, end, &r->env, &r->nul);
	if (!strcmp(key, "cwd"))
		return read_text(v, end, &r->cwd, &r->nul);
	if (!strcmp(key, "tty"))
		return read_bool(v, end, &r->tty);
	if (!strcmp(key, "seal"))
		return read_bool(v, end, &r->seal);
	if (!strcmp(key, "binds"))
		return read_list(v, end, &r->binds, &r->nul);
	if (!strcmp(key, "rules"))
		return read_bool(v, end, &r->rules);
	if (!strcmp(key, "egress"))
		return read_bool(v, end, &r->egress);
	if (!strcmp(key, "killall"))
		return read_bool(v, end, &r->killall);
	if (!strcmp(key, "ready"))
		return read_bool(v, end, &r->ready);
	if (!strcmp(key, "upstream"))
		return read_int(v, end, 1, LLONG_MAX, &r->upstream);
	if (!strcmp(key, "run"))
		return read_int(v, end, 0, 1 << 20, &r->run);
	if (!strcmp(key, "path"))
		return read_text(v, end, &r->path, &r->nul);
	if (!strcmp(key, "rows") || !strcmp(key, "cols")) {
		n = key[0] == 'r' ? r->rows : r->cols;
		if (read_int(v, end, 0, 65535, &n))
			return -1;
		*(key[0] == 'r' ? &r->rows : &r->cols) = (unsigned)n;
	}
	return 0;
}

/* agent_parse_request reads an execRequest as Go's json.Unmarshal does;
 * -1 where Unmarshal would fail. */
int agent_parse_request(const char *msg, size_t len, struct request *r)
{
	*r = (struct request){0};
	if (json_whole(msg, len))
		return -1;
	return json_for_each_member(msg, msg + len, r, request_member);
}

void agent_free_request(struct request *r)
{
	strings_free(&r->argv);
	strings_free(&r->env);
	strings_free(&r->binds);
	free(r->cwd);
	free(r->path);
	*r = (struct request){0};
}

static int control_member(void *ctx, const char *key, const char *v, const char *end)
{
	struct control *c = ctx;
	if (!strcmp(key, "signal"))
		return read_int(v, end, LLONG_MIN, LLONG_MAX, &c->signal);
	if (!strcmp(key, "kill"))
		return read_bool(v, end, &c->kill);
	if (!strcmp(key, "rows") || !strcmp(key, "cols"))
		return read_int(v, end, 0, 65535, key[0] == 'r' ? &c->rows : &c->cols);
	return 0;
}

int agent_parse_control(const char *msg, size_t len, struct control *c)
{
	*c = (struct control){0};
	if (json_whole(msg, len))
		return -1;
	return json_for_each_member(msg, msg + len, c, control_member);
}

/* agent_event_json writes an execEvent as json.Marshal does. */
void agent_event_json(const struct event *ev, struct buf *out)
{
	buf_puts(out, "{");
	if (ev->started)
		buf_puts(out, "\"started\":true,");
	if (ev->pid) {
		buf_puts(out, "\"pid\":");
		json_put_int(out, ev->pid);
		buf_puts(out, ",");
	}
	if (ev->exited)
		buf_puts(out, "\"exited\":true,");
	buf_puts(out, "\"code\":");
	json_put_int(out, ev->code);
	if (ev->signal) {
		buf_puts(out, ",\"signal\":");
		json_put_int(out, ev->signal);
	}
	if (ev->error.len) {
		buf_puts(out, ",\"error\":");
		json_put_string(out, ev->error.p);
	}
	buf_puts(out, "}");
}

static void set_error(struct event *ev, int code, const char *a, const char *b, const char *c)
{
	ev->code = code;
	ev->error.len = 0;
	buf_puts(&ev->error, a);
	buf_puts(&ev->error, b ? b : "");
	buf_puts(&ev->error, c ? c : "");
}

/* send_event sends ev with fd (when not negative) attached. */
static void send_event(int sock, const struct event *ev, int fd)
{
	struct buf b = {0};
	agent_event_json(ev, &b);
	if (!b.failed)
		wire_send(sock, b.p, b.len, &fd, fd >= 0 ? 1 : 0);
	free(b.p);
}

/* go_error is strerror as Go's syscall.Errno spells it. */
static const char *go_error(int err, char *space, size_t size)
{
	snprintf(space, size, "%s", strerror(err));
	if (space[0] >= 'A' && space[0] <= 'Z' && !(space[1] >= 'A' && space[1] <= 'Z'))
		space[0] = (char)(space[0] - 'A' + 'a');
	return space;
}

/* ---- finding the program -------------------------------------------- */

/* why_not_executable names the likely reason execve refused path. */
static const char *why_not_executable(const char *path)
{
	struct stat st;
	struct statvfs vfs;
	if (stat(path, &st) == 0 && (st.st_mode & 0111) == 0)
		return "the file has no execute permission";
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOEXEC))
		return "it is on a noexec mount: nothing written in the sandbox can run";
	return "the sandbox's exec rules refuse it";
}

void agent_exec_error(const char *name, const char *path, int err, struct event *ev)
{
	char text[128];
	switch (err) {
	case ENOENT:
		set_error(ev, 127, name, ": command not found", NULL);
		break;
	case EACCES:
	case EPERM:
		set_error(ev, 126, name, ": permission denied (", why_not_executable(path));
		buf_puts(&ev->error, ")");
		break;
	case ENOTDIR:
	case ENOEXEC:
	case EISDIR:
		set_error(ev, 126, name, ": cannot run: ", go_error(err, text, sizeof text));
		break;
	default:
		set_error(ev, 126, name, ": ", go_error(err, text, sizeof text));
	}
}

/* cwd_error explains a working folder the command could not start in. */
static void cwd_error(const char *cwd, int err, struct event *ev)
{
	char text[128];
	if (err == ENOENT) {
		set_error(ev, 126, "working folder ", cwd, " does not exist in the sandbox; create it first or pass another --cwd");
		return;
	}
	set_error(ev, 126, "working folder ", cwd, ": ");
	buf_puts(&ev->error, go_error(err, text, sizeof text));
}

/* clean_join is Go's filepath.Join(dir, name) for a name without a slash:
 * filepath.Clean (fastexec.c's, held to Go's by a test) of the two joined. */
static char *clean_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 1;
	char *in = malloc(n + 1);
	if (!in)
		return NULL;
	snprintf(in, n + 1, "%s/%s", dir, name);
	char *out = fastexec_clean(in);
	free(in);
	return out;
}

static const char *env_value(char *const *env, int n, const char *name)
{
	size_t k = strlen(name);
	for (int i = n - 1; i >= 0; i--)
		if (strncmp(env[i], name, k) == 0 && env[i][k] == '=')
			return env[i] + k + 1;
	return "";
}

/* not_found: under an allow-list, a program the host has is absent
 * from the sandbox unless listed, so "not found" says where to look. */
static const char *not_found(const struct agent_config *cfg)
{
	return cfg->allow_all ? ": command not found" : ": command not found (in this sandbox only the policy's exec.allow programs exist)";
}

char *agent_lookup(const struct agent_config *cfg, const char *name, const char *cwd, char *const *env, int nenv,
		   struct event *ev)
{
	char *path = NULL;
	if (!strchr(name, '/')) {
		const char *dirs = env_value(env, nenv, "PATH");
		while (*dirs && !path) {
			const char *c = strchrnul(dirs, ':');
			char *dir = strndup(dirs, (size_t)(c - dirs));
			dirs = *c ? c + 1 : c;
			if (!dir || !*dir) {
				free(dir);
				continue;
			}
			char *candidate = clean_join(dir, name);
			free(dir);
			struct stat st;
			if (candidate && stat(candidate, &st) == 0 && S_ISREG(st.st_mode))
				path = candidate;
			else
				free(candidate);
		}
		if (!path) {
			set_error(ev, 127, name, not_found(cfg), NULL);
			return NULL;
		}
	} else if (!(path = name[0] == '/' ? strdup(name) : clean_join(cwd && *cwd ? cwd : "/", name))) {
		/* a relative path is the command's, from its working folder */
		set_error(ev, 126, name, ": out of memory", NULL);
		return NULL;
	}
	if (!cfg->allow_all && path[0] == '/') {
		char *real = realpath(path, NULL);
		int ok = 0;
		for (int i = 0; real && i < cfg->allow.n && !ok; i++)
			ok = strcmp(cfg->allow.v[i], real) == 0;
		for (int i = 0; real && i < cfg->exec_dirs.n && !ok; i++) {
			size_t k = strlen(cfg->exec_dirs.v[i]);
			ok = strncmp(cfg->exec_dirs.v[i], real, k) == 0 && real[k] == '/';
		}
		if (!real || !ok) {
			set_error(ev, 127, name, real ? ": not allowed by the policy's exec.allow" : not_found(cfg), NULL);
			free(real);
			free(path);
			return NULL;
		}
		free(real);
	}
	return path;
}

/* ---- starting a command --------------------------------------------- */

/* The signals PID 1 catches and drops (see run). */
static const int caught[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};

struct child {
	const char *path, *cwd;
	char *const *argv, *const *env;
	int fds[3], tty;
	int memfd; /* >= 0: run this ruled program's copy (AnnotationCommands) */
};

/* How long a command's process may take to reach its execve. */
#define EXEC_WAIT_MS 5000
/* how long the loop is idle before the spent Landlock ruleset is freed */
#define SPENT_IDLE_MS 50

/* What child_main reports on errfd when it fails before execve: the errno,
 * and whether it was the working folder (so the error names that, not the
 * command, which was never tried). */
struct spawn_error {
	int err, in_cwd;
};

/* loader_clean leaves out of env what would load code the sandbox wrote
 * into a ruled program's process (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH,
 * GCONV_PATH, ...), where it could read the program's bytes out of its
 * own memory. Run in the agent before the command's process is made:
 * that one shares the agent's memory until its execve (spawn), and must
 * not allocate. NULL when out of memory. */
static char **loader_clean(char *const *env)
{
	static const char *const unsafe[] = {"LD_", "GCONV_PATH=", "GLIBC_TUNABLES=", "MALLOC_TRACE="};
	int n = 0;
	while (env[n])
		n++;
	char **out = calloc((size_t)n + 1, sizeof *out);
	if (!out)
		return NULL;
	int k = 0;
	for (int i = 0; i < n; i++) {
		int drop = 0;
		for (size_t j = 0; j < sizeof unsafe / sizeof unsafe[0] && !drop; j++)
			drop = strncmp(env[i], unsafe[j], strlen(unsafe[j])) == 0;
		if (!drop)
			out[k++] = env[i];
	}
	return out;
}

/* child_main runs in the command's process, a copy of the agent's: a fork,
 * not a vfork, because the sandbox could stop that process (SIGSTOP to the
 * next pid) before its execve, and a vfork parent would wait with it. It
 * reports a failure before execve as a spawn_error on errfd. */
static void child_main(const struct child *c, int errfd)
{
	struct spawn_error e = {0};
	/* the agent's own handlers do nothing: before execve resets them, a
	 * signal to the command must act as it will after */
	for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
		signal(caught[i], SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		goto fail;
	if (chdir(c->cwd) < 0) {
		e.in_cwd = 1;
		goto fail;
	}
	int fds[3];
	for (int i = 0; i < 3; i++) {
		fds[i] = c->fds[i];
		if (fds[i] < 3 && (fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3)) < 0)
			goto fail;
	}
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			goto fail;
	if (c->tty && ioctl(0, TIOCSCTTY, 1) < 0)
		goto fail;
	if (c->memfd >= 0)
		syscall(SYS_execveat, c->memfd, "", c->argv, c->env, AT_EMPTY_PATH);
	else
		execve(c->path, c->argv, c->env);
fail:
	e.err = errno;
	if (write(errfd, &e, sizeof e) < 0)
		_exit(127);
	_exit(127);
}

struct spawn_arg {
	const struct child *c;
	int errfd;
};

static int clone_main(void *arg)
{
	struct spawn_arg *a = arg;
	child_main(a->c, a->errfd);
	return 127;
}

/* A fork copies the agent's address space: its page tables here (~0.1 ms
 * of every command, and copy-on-write faults after), a few milliseconds in
 * gVisor's own kernel. A child that shares it (CLONE_VM, on a stack of its
 * own) until its execve costs a fraction of that. The agent waits for that
 * execve without touching memory the child uses (its signals are blocked
 * meanwhile, so no handler runs and errno stays the child's; the child
 * allocates nothing, so no lock of the allocator is held by it), and does
 * not wait with it as a vfork parent would: a child stopped before its
 * execve is killed at the deadline, and its stack is then left to it. The
 * child is no more exposed than the agent: both are one non-dumpable
 * memory (PR_SET_DUMPABLE is the memory's), the same user, the same
 * filters. */
#define SPAWN_STACK (256 << 10)
static char *spawn_stack;

/* ---- a process cloned ahead (gVisor) -------------------------------- */

/* gVisor runs a process's seccomp filter on every syscall number each time
 * the process clones (it caches the answers that need no arguments), which
 * makes a clone of the filtered agent cost milliseconds. So under gVisor
 * the agent clones the next command's process while it is idle: a copy
 * sharing its memory (as spawn's) that closes its copies of the agent's
 * descriptors and waits on a socket for the command's descriptors; it then
 * runs child_main like any command's process. It is made only once the
 * agent's filters and capabilities are final (after the seal, and a
 * pooled sandbox's claim filter), so it carries exactly what a command
 * would; a command never runs in a process the agent did not restrict. */
static struct {
	pid_t pid;   /* 0: none ready */
	int sock;    /* the agent's end of its socket, or -1 */
	char *stack; /* its stack, SPAWN_STACK long, kept for the next one */
	const struct child *volatile c; /* the command, set before it is woken */
	int failed;  /* the last try failed (out of processes): not before a command ends */
} zygote = {.sock = -1};

static int zygote_main(void *arg)
{
	int sock = (int)(intptr_t)arg;
	/* Only the agent's stdio and its own end stay: it must not keep the
	 * agent's connections open, nor their files in the agent's epoll set. */
	if (syscall(SYS_close_range, 3, sock - 1, 0) < 0 || syscall(SYS_close_range, sock + 1, ~0U, 0) < 0)
		_exit(127);
	char b = 1;
	if (syscall(SYS_write, sock, &b, 1) != 1)
		_exit(127);
	/* The command: a byte, with errfd, stdin, stdout, stderr and the
	 * ruled program's copy (if any) as descriptors. Raw calls: errno and
	 * the rest of the thread's state are the agent's, which runs meanwhile. */
	int got[5];
	union {
		char buf[CMSG_SPACE(sizeof got)];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = &b, .iov_len = 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	if (syscall(SYS_recvmsg, sock, &m, MSG_CMSG_CLOEXEC) != 1)
		_exit(0); /* retired */
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	if (!cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len < CMSG_LEN(4 * sizeof(int)))
		_exit(127);
	int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	memcpy(got, CMSG_DATA(cm), (size_t)n * sizeof(int));
	/* The agent waits, its signals blocked, until this has run execve. */
	struct child mine = *zygote.c;
	for (int i = 0; i < 3; i++)
		mine.fds[i] = got[i + 1];
	mine.memfd = n > 4 ? got[4] : -1;
	syscall(SYS_close, sock);
	child_main(&mine, got[0]);
	return 127;
}

/* zygote_make clones the next command's process, if none is ready, and
 * waits (its signals blocked: the copy runs on the agent's memory) until
 * it has closed its copies of the agent's descriptors. */
static void zygote_make(void)
{
	if (zygote.pid > 0 || zygote.failed || (!zygote.stack && !(zygote.stack = malloc(SPAWN_STACK))))
		return;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return;
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid_t pid = clone(zygote_main, zygote.stack + SPAWN_STACK, CLONE_VM | SIGCHLD, (void *)(intptr_t)sv[1]);
	char b;
	int ready = pid > 0 && read(sv[0], &b, 1) == 1;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);
	if (ready) {
		zygote.pid = pid;
		zygote.sock = sv[0];
		return;
	}
	close(sv[0]);
	if (pid > 0) {
		kill(pid, SIGKILL);
		zygote.stack = NULL; /* the child's until it is gone; reaped with the others */
	}
	zygote.failed = 1;
}

/* zygote_retire ends the process kept ready, and waits for it. */
static void zygote_retire(void)
{
	if (zygote.pid <= 0)
		return;
	kill(zygote.pid, SIGKILL);
	while (waitpid(zygote.pid, NULL, 0) < 0 && errno == EINTR) {
	}
	close(zygote.sock);
	zygote.sock = -1;
	zygote.pid = 0;
}

/* zygote_gone: the reaper collected pid; 1 if it was the ready process. */
static int zygote_gone(pid_t pid)
{
	if (pid <= 0 || pid != zygote.pid)
		return 0;
	close(zygote.sock);
	zygote.sock = -1;
	zygote.pid = 0;
	return 1;
}

/* zygote_take hands c to the process kept ready: its pid, or 0 when there
 * is none usable (it was stopped, or it is gone). The agent's signals are
 * blocked. errfd is the write end of spawn's pipe. */
static pid_t zygote_take(const struct child *c, int errfd)
{
	if (zygote.pid <= 0)
		return 0;
	/* A process of the sandbox may have stopped it (same user): a
	 * stopped one is not waited for. */
	siginfo_t si = {0};
	if (waitid(P_PID, (id_t)zygote.pid, &si, WSTOPPED | WNOHANG | WNOWAIT) == 0 && si.si_pid == zygote.pid) {
		zygote_retire();
		return 0;
	}
	int fds[5] = {errfd, c->fds[0], c->fds[1], c->fds[2], c->memfd};
	int n = c->memfd >= 0 ? 5 : 4;
	union {
		char buf[CMSG_SPACE(sizeof fds)];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	char b = 1;
	struct iovec iov = {.iov_base = &b, .iov_len = 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			   .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int))};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
	zygote.c = c;
	if (sendmsg(zygote.sock, &m, MSG_NOSIGNAL) != 1) {
		zygote_retire();
		return 0;
	}
	pid_t pid = zygote.pid;
	close(zygote.sock);
	zygote.sock = -1;
	zygote.pid = 0;
	return pid;
}

/* spawn forks a command and waits until it has run execve: 0, or the
 * errno it failed with (*in_cwd set when changing to the working folder
 * failed). *stopped is set when it did not get there in time (it is killed
 * then; signals to the agent do not extend the wait). *pid is the process,
 * to be reaped with the others. */
static int spawn(const struct child *c, pid_t *pid, int *stopped, int *in_cwd)
{
	*stopped = *in_cwd = 0;
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) < 0)
		return errno;
	sigset_t all, old;
	/* read by the child while this waits: it lives as long as the wait */
	struct spawn_arg a = {.c = c, .errfd = ep[1]};
	int ready = 0; /* the process kept ready took it */
	/* without memory for the stack, a fork */
	int shared = spawn_stack || (spawn_stack = malloc(SPAWN_STACK));
	if (shared) {
		sigfillset(&all);
		sigprocmask(SIG_BLOCK, &all, &old);
		*pid = zygote_take(c, ep[1]);
		ready = *pid > 0;
		if (!ready)
			*pid = clone(clone_main, spawn_stack + SPAWN_STACK, CLONE_VM | SIGCHLD, &a);
	} else {
		*pid = fork();
		if (*pid == 0) {
			close(ep[0]);
			child_main(c, ep[1]);
		}
	}
	int err = *pid < 0 ? errno : 0;
	close(ep[1]);
	if (*pid > 0) {
		struct timespec now, end;
		clock_gettime(CLOCK_MONOTONIC, &end);
		end.tv_sec += EXEC_WAIT_MS / 1000;
		struct pollfd p = {.fd = ep[0], .events = POLLIN};
		int n;
		for (;;) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			long long left = (long long)(end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
			n = left > 0 ? poll(&p, 1, (int)left) : 0;
			if (n >= 0 || errno != EINTR)
				break;
		}
		if (n <= 0) {
			kill(*pid, SIGKILL);
			*stopped = 1;
			if (ready)
				zygote.stack = NULL; /* the killed child's until it is gone */
			else if (shared)
				spawn_stack = NULL;
		} else {
			/* EOF: the pipe closed with a successful execve */
			struct spawn_error e = {0};
			while (read(ep[0], &e, sizeof e) < 0 && errno == EINTR) {
			}
			err = e.err;
			*in_cwd = e.in_cwd;
		}
	}
	close(ep[0]);
	if (shared)
		sigprocmask(SIG_SETMASK, &old, NULL);
	/* The process kept ready was stopped before it got to execve (a
	 * command stopped it after the check): nothing ran, so once more in a
	 * new process. */
	if (ready && *stopped)
		return spawn(c, pid, stopped, in_cwd);
	return err;
}

/* open_pty makes a new terminal in the sandbox's own devpts. The slave
 * opens read-write and never as the agent's own controlling terminal:
 * the command's TIOCSCTTY would fail with EPERM otherwise. */
static int open_pty(unsigned rows, unsigned cols, int *master, int *slave)
{
	int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -1;
	int unlock = 0;
	if (ioctl(m, TIOCSPTLCK, &unlock) < 0)
		goto fail;
	int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0)
		goto fail;
	if (rows > 0 && cols > 0) {
		struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
		ioctl(m, TIOCSWINSZ, &ws);
	}
	*master = m;
	*slave = s;
	return 0;
fail:;
	int err = errno;
	close(m);
	errno = err;
	return -1;
}

static int stub_program(const char *path);
static int ruled_memfd(int prog);
static const struct strings *ruled_script(int prog);
static void close_fds(int *fds, int n);

/* start forks and execs one command; it returns the pid, or 0 with ev
 * filled in. A terminal's master side goes to *master. prog >= 0 runs
 * that ruled program's real copy, approved for this argv: for a stub's
 * call always, for the host's when argv[0] finds the program's stub. */
static pid_t start_ruled(const struct agent_config *cfg, struct request *r, const int *fds, int nfds, int *master,
			 struct event *ev, int prog);
static pid_t start(const struct agent_config *cfg, struct request *r, const int *fds, int nfds, int *master,
		   struct event *ev)
{
	return start_ruled(cfg, r, fds, nfds, master, ev, r->run > 0 ? (int)r->run - 1 : -1);
}

static pid_t start_ruled(const struct agent_config *cfg, struct request *r, const int *fds, int nfds, int *master,
			 struct event *ev, int prog)
{
	*master = -1;
	if (r->argv.n == 0 || !r->argv.v[0][0]) {
		set_error(ev, 125, "no command given", NULL, NULL);
		return 0;
	}
	if (r->nul) {
		agent_exec_error(r->argv.v[0], r->argv.v[0], EINVAL, ev);
		return 0;
	}
	char *path = r->path && prog >= 0 ? strdup(r->path) : agent_lookup(cfg, r->argv.v[0], r->cwd, r->env.v, r->env.n, ev);
	if (!path) {
		if (!ev->error.len)
			set_error(ev, 125, "out of memory", NULL, NULL);
		return 0;
	}
	/* the host's approval holds only where argv[0] finds that program's
	 * stub; elsewhere the command runs as it is (a stub asks itself) */
	int memfd = -1;
	const struct strings *script = NULL;
	if (prog >= 0 && (r->path || stub_program(path) == prog)) {
		memfd = ruled_memfd(prog);
		script = ruled_script(prog);
	}
	if (prog >= 0 && r->path && memfd < 0 && !script) {
		set_error(ev, 126, r->argv.v[0], ": warden has no copy of this ruled program; nothing was run", NULL);
		free(path);
		return 0;
	}
	/* a script runs as the kernel would run it: its interpreter, with the
	 * script's readable text in place of the stub's path */
	char **argv = r->argv.v;
	if (script) {
		argv = calloc((size_t)(script->n + r->argv.n), sizeof *argv);
		char *interp = strdup(script->v[0]);
		if (!argv || !interp) {
			free(argv);
			free(interp);
			free(path);
			set_error(ev, 125, "out of memory", NULL, NULL);
			return 0;
		}
		memcpy(argv, script->v, (size_t)script->n * sizeof *argv);
		memcpy(argv + script->n, r->argv.v + 1, (size_t)(r->argv.n - 1) * sizeof *argv);
		free(path);
		path = interp;
	}
	static char *const no_env[] = {NULL};
	struct child c = {.path = path, .cwd = r->cwd && *r->cwd ? r->cwd : "/", .argv = argv,
			  .env = r->env.n ? r->env.v : no_env, .tty = r->tty, .memfd = memfd};
	/* a ruled program's copy and a script's interpreter get no loader
	 * variables; cleaned here, since the child must not allocate */
	char **clean = NULL;
	if ((memfd >= 0 || script) && !(clean = loader_clean(c.env))) {
		set_error(ev, 125, "out of memory", NULL, NULL);
		free(path);
		if (argv != r->argv.v)
			free(argv);
		return 0;
	}
	if (clean)
		c.env = clean;
	int slave = -1;
	if (r->tty) {
		char text[128];
		if (open_pty(r->rows, r->cols, master, &slave) < 0) {
			set_error(ev, 125, "terminal: ", go_error(errno, text, sizeof text), NULL);
			free(path);
			free(clean);
			if (argv != r->argv.v)
				free(argv);
			return 0;
		}
		c.fds[0] = c.fds[1] = c.fds[2] = slave;
	} else {
		if (nfds != 3) {
			char text[96];
			snprintf(text, sizeof text, "want stdin, stdout and stderr, got %d descriptors", nfds);
			set_error(ev, 125, text, NULL, NULL);
			free(path);
			free(clean);
			if (argv != r->argv.v)
				free(argv);
			return 0;
		}
		memcpy(c.fds, fds, sizeof c.fds);
	}
	pid_t pid = 0;
	int stopped, in_cwd;
	int err = spawn(&c, &pid, &stopped, &in_cwd);
	if (slave >= 0)
		close(slave);
	/* a child killed at the deadline may still be reading it: left to it,
	 * as its stack is */
	if (!stopped)
		free(clean);
	if (err || stopped) {
		/* a child that failed before execve is reaped with the others */
		if (*master >= 0)
			close(*master);
		*master = -1;
		if (stopped)
			set_error(ev, 126, r->argv.v[0], ": did not start: its process was stopped before it could run", NULL);
		else if (in_cwd)
			cwd_error(c.cwd, err, ev);
		else
			agent_exec_error(r->argv.v[0], path, err, ev);
		free(path);
		if (argv != r->argv.v)
			free(argv);
		return 0;
	}
	free(path);
	if (argv != r->argv.v)
		free(argv);
	return pid;
}

/* ---- the event loop ------------------------------------------------- */

struct conn {
	int fd;
	int stub;    /* a stub's connection (from inside the sandbox) */
	unsigned ask; /* a stub's call waiting for the host's answer */
	struct request req; /* its request, and its descriptors: */
	int fds[3], nfds, prog;
	pid_t pid;   /* the command, once started */
	int reading; /* the connection is watched for messages */
	struct stdio_files stdio; /* what the command's stdio are */
	struct relay *term;       /* the relay of its terminal (gVisor), or NULL */
	struct conn *next;
};

static struct agent {
	struct agent_config cfg;
	int epoll, sigfd, sealed;
	struct landlock landlock; /* filled by prepare, enforced by seal */
	struct strings split;     /* landlock_split_dirs of the hidden programs, made once */
	uint64_t prepared_for;    /* their landlock_fingerprint at prepare */
	int broken;               /* a Landlock step failed: no command runs */
	struct buf why;           /* what failed */
	struct conn *conns;
	int gvisor;          /* --gvisor: no Landlock, the file view is the wall */
	const char *seccomp; /* --seccomp: the filter to load (gVisor: runsc loads none) */
	const char *listen;  /* --listen: the socket's name, until the host connects */
	int accept_paused; /* out of descriptors: a listener is not watched (1: the host's, 2: the stubs') */
	long long paused_at; /* when, in ms of CLOCK_MONOTONIC */
	int stub_listener;   /* the stubs' socket, or -1 */
	int rules;           /* the host's command-rules channel, or -1 */
	int memfds[64];      /* each ruled program's real copy, from the host */
	struct strings scripts[64]; /* or, for a script, how it runs (rulesAnswer.Script) */
	unsigned next_ask;
	const char *egress_addr; /* --egress: where the sandbox finds the egress proxy (gVisor) */
	int egress_listener;     /* that TCP listener, or -1 */
	int egress_paused;       /* it is not watched: no upstream ready, or too many relays */
	int egress;              /* the host's egress channel, or -1 */
	struct spare {
		int fd;
		long long id;
	} spares[8]; /* upstreams the host passed in, ready for a connection */
	int nspares;
	struct relay *relays;
	int nrelays;
	int claimed; /* a pooled gVisor agent has bound its session's folders (gvisor_claim) */
	const char *seccomp_claim; /* --seccomp-claim: the filter that takes back what the claim needed */
	int claim_filter;          /* it, open, until loaded after the claim's answer (load_claim_filter) */
	long long last_start;      /* when the last command started, in ms of CLOCK_MONOTONIC */
	int started;               /* a command has started */
	long long active_at;       /* when the loop last had an event, in ms of CLOCK_MONOTONIC */
} agent = {.landlock = {.fd = -1, .spent = -1}, .stub_listener = -1, .rules = -1, .claim_filter = -1,
	   .memfds = {[0 ... 63] = -1}, .egress_listener = -1, .egress = -1};

static char listener_tag, signal_tag, stub_tag, rules_tag, egress_listener_tag, egress_tag;

static void fatal(const char *what, const char *detail)
{
	dprintf(2, "warden: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	_exit(EXIT_WARDEN);
}

static void trim(void) { malloc_trim(0); }

/* fail_landlock makes every later seal, and so every command, fail. */
static void fail_landlock(const char *why)
{
	agent.broken = 1;
	if (!agent.why.len)
		buf_puts(&agent.why, why && *why ? why : "out of memory");
}

/* prepare starts the Landlock ruleset with the rules known at start:
 * most of the work (about a thousand rules where exec.allow hides the
 * system's other programs), done before a claim rather than in it. */
static void prepare(void)
{
	if (agent.gvisor)
		return;
	struct rules rules = {0};
	struct buf err = {0};
	if (!agent.split.n && !agent.split.failed)
		landlock_split_dirs(agent.cfg.hidden.v, agent.cfg.hidden.n, &agent.split);
	agent.prepared_for = landlock_fingerprint(&agent.split);
	landlock_base_rules(&agent.cfg, &rules);
	if (rules.failed)
		fail_landlock("out of memory");
	else if (landlock_begin(&agent.landlock, agent.cfg.writable.n > 0, &err) ||
		 landlock_add(&agent.landlock, &rules, &err))
		fail_landlock(err.p);
	rules_free(&rules);
	free(err.p);
	trim();
}

/* seal adds the session folders' rules and applies Landlock, once. A
 * ruleset prepared before the host's folders changed (a package upgrade
 * while the sandbox waited in a pool) is made again: its rules would miss
 * the new files. */
static int seal(struct event *ev)
{
	if (agent.sealed)
		return 0;
	if (agent.gvisor) {
		if (agent.cfg.pooled && !agent.claimed) {
			if (!ev->error.len)
				set_error(ev, 125, "the sandbox's folders are not bound yet", NULL, NULL);
			return -1;
		}
		agent.sealed = 1;
		return 0;
	}
	if (!agent.broken && landlock_fingerprint(&agent.split) != agent.prepared_for) {
		if (agent.landlock.fd >= 0)
			close(agent.landlock.fd);
		agent.landlock.fd = -1;
		prepare();
	}
	if (!agent.broken) {
		struct rules rules = {0};
		struct buf err = {0};
		landlock_session_rules(&agent.cfg, &rules);
		if (rules.failed)
			fail_landlock("out of memory");
		else if (landlock_add(&agent.landlock, &rules, &err) || landlock_enforce(&agent.landlock, &err))
			fail_landlock(err.p);
		rules_free(&rules);
		free(err.p);
	}
	if (agent.broken) {
		set_error(ev, 125, "landlock: ", agent.why.p ? agent.why.p : "out of memory", NULL);
		return -1;
	}
	agent.sealed = 1;
	strings_free(&agent.cfg.hidden); /* needed no more */
	strings_free(&agent.split);
	return 0;
}

static long long monotonic_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* resume_accept watches the listener again after accept ran out of
 * descriptors. */
static void resume_accept(void)
{
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = &listener_tag};
	if ((agent.accept_paused & 1) && epoll_ctl(agent.epoll, EPOLL_CTL_MOD, LISTENER_FD, &e) == 0)
		agent.accept_paused &= ~1;
	struct epoll_event es = {.events = EPOLLIN, .data.ptr = &stub_tag};
	if ((agent.accept_paused & 2) && epoll_ctl(agent.epoll, EPOLL_CTL_MOD, agent.stub_listener, &es) == 0)
		agent.accept_paused &= ~2;
}

static void close_fds_of(struct conn *c)
{
	for (int i = 0; i < c->nfds; i++)
		close(c->fds[i]);
	c->nfds = 0;
}

static void drop(struct conn *c)
{
	for (struct conn **p = &agent.conns; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	/* Messages the client sent that were not read (a kill sent while
	 * the command could not start) are read first: closing over them
	 * would reset the connection, losing the last event sent on it. */
	char discard[64];
	for (int i = 0; i < 64 && recv(c->fd, discard, sizeof discard, MSG_DONTWAIT) > 0; i++) {
	}
	close(c->fd); /* leaves the epoll set with it */
	if (c->stub) {
		close_fds_of(c);
		agent_free_request(&c->req);
	}
	free(c);
	resume_accept();
}

static void stop_reading(struct conn *c)
{
	if (c->reading)
		epoll_ctl(agent.epoll, EPOLL_CTL_DEL, c->fd, NULL);
	c->reading = 0;
}

/* receive reads one message, peeking at its size first so that an idle
 * agent holds no buffer. It returns the message, or NULL with err set
 * (NULL: nothing to read after all). */
static char *receive(int fd, size_t *len, int *fds, int *nfds, const char **err)
{
	char peek;
	*nfds = 0;
	*err = NULL;
	ssize_t size = recv(fd, &peek, 1, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	if (size < 0) {
		/* EAGAIN: an event for a connection since gone, whose memory
		 * a new one took */
		*err = errno == EAGAIN ? NULL : strerror(errno);
		return NULL;
	}
	size_t cap = (size_t)size < MAX_MESSAGE ? (size_t)size : MAX_MESSAGE;
	char *msg = malloc(cap + 1);
	if (!msg) {
		*err = "out of memory";
		return NULL;
	}
	ssize_t n = wire_receive(fd, msg, cap + 1, fds, nfds);
	const char *why = NULL;
	if (n == -1)
		why = strerror(errno);
	else if (n == -2 || n > MAX_MESSAGE)
		why = "message larger than 1048576 bytes: shorten the command line or its environment";
	else if (n == 0)
		why = "connection closed";
	if (why) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		free(msg);
		*err = why;
		return NULL;
	}
	*len = (size_t)n;
	return msg;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* ---- command rules: the stubs and the host's answers ----------------- */

static int stub_program(const char *path)
{
	char *real = realpath(path, NULL);
	int prog = -1;
	for (int i = 0; real && i < agent.cfg.stubs.n && prog < 0; i++)
		if (!strcmp(real, agent.cfg.stubs.v[i]))
			prog = agent.cfg.stub_prog[i];
	free(real);
	return prog;
}

static int ruled_memfd(int prog)
{
	return prog >= 0 && prog < 64 ? agent.memfds[prog] : -1;
}

/* ruled_script: a ruled script's interpreter line and text, or NULL. */
static const struct strings *ruled_script(int prog)
{
	return prog >= 0 && prog < 64 && agent.scripts[prog].n > 1 ? &agent.scripts[prog] : NULL;
}

/* stub_reply sends a stub a line to print, and with final its end. */
static void stub_reply(struct conn *c, int code, const char *line, int final)
{
	struct buf b = {0};
	buf_puts(&b, final ? "{\"code\":" : "{\"waiting\":true,\"code\":");
	json_put_int(&b, code);
	buf_puts(&b, ",\"error\":");
	json_put_string(&b, line);
	buf_puts(&b, "}");
	if (!b.failed)
		wire_send(c->fd, b.p, b.len, NULL, 0);
	free(b.p);
}

/* parent_command reads the command line of the stub's parent. */
static void parent_command(int fd, struct buf *out)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	char path[64], text[4096];
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)cred.pid);
	FILE *f = fopen(path, "re");
	int ppid = 0;
	if (!f)
		return;
	if (fgets(text, sizeof text, f)) {
		char *close_paren = strrchr(text, ')');
		if (close_paren)
			sscanf(close_paren + 1, " %*c %d", &ppid);
	}
	fclose(f);
	if (ppid <= 0)
		return;
	snprintf(path, sizeof path, "/proc/%d/cmdline", ppid);
	int cf = open(path, O_RDONLY | O_CLOEXEC);
	if (cf < 0)
		return;
	ssize_t n = read(cf, text, sizeof text - 1);
	close(cf);
	for (ssize_t i = 0; i < n; i++)
		if (text[i] == 0)
			text[i] = i == n - 1 ? 0 : ' ';
	if (n > 0) {
		text[n] = 0;
		buf_puts(out, text);
	}
}

/* stub_call takes a stub's request: a ruled program started anywhere in
 * the sandbox. It waits for the host's answer on the rules channel. */
static void stub_call(struct conn *c, struct request *r, int *fds, int nfds)
{
	int prog = r->path && *r->path ? stub_program(r->path) : -1;
	const char *why = NULL;
	if (r->nul || r->argv.n == 0 || nfds != 3)
		why = "malformed call from warden's stub; nothing was run";
	else if (prog < 0)
		why = ": not a program warden's command rules know (a copy of warden's stub runs nothing)";
	else if (agent.rules < 0)
		why = ": warden is not answering for this session's command rules; nothing was run";
	if (why) {
		struct buf line = {0};
		if (why[0] == ':')
			buf_puts(&line, r->path ? r->path : "?");
		buf_puts(&line, why);
		stub_reply(c, 126, line.p ? line.p : why, 1);
		free(line.p);
		close_fds(fds, nfds);
		agent_free_request(r);
		drop(c);
		return;
	}
	c->req = *r;
	c->req.tty = 0; /* the stub passes its own stdio */
	memcpy(c->fds, fds, sizeof c->fds);
	c->nfds = 3;
	c->prog = prog;
	c->ask = ++agent.next_ask;
	struct buf b = {0}, parent = {0};
	parent_command(c->fd, &parent);
	buf_puts(&b, "{\"ask\":");
	json_put_int(&b, c->ask);
	buf_puts(&b, ",\"program\":");
	json_put_int(&b, prog);
	buf_puts(&b, ",\"argv\":");
	json_put_strings(&b, r->argv.v, r->argv.n);
	buf_puts(&b, ",\"cwd\":");
	json_put_string(&b, r->cwd ? r->cwd : "/");
	buf_puts(&b, ",\"parent\":");
	json_put_string(&b, parent.p ? parent.p : "");
	buf_puts(&b, "}");
	if (b.failed || wire_send(agent.rules, b.p, b.len, NULL, 0) < 0) {
		stub_reply(c, 126, "warden is not answering for this session's command rules; nothing was run", 1);
		drop(c);
	}
	free(b.p);
	free(parent.p);
}

/* rules_channel makes c the host's channel for command rules (a newer one
 * replaces it: a restarted daemon). The ruled programs' copies follow on
 * it, one per message. */
static void rules_channel(struct conn *c)
{
	for (struct conn **p = &agent.conns; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = &rules_tag};
	epoll_ctl(agent.epoll, EPOLL_CTL_DEL, c->fd, NULL);
	if (agent.rules >= 0)
		close(agent.rules);
	agent.rules = c->fd;
	free(c);
	if (epoll_ctl(agent.epoll, EPOLL_CTL_ADD, agent.rules, &e) < 0) {
		close(agent.rules);
		agent.rules = -1;
	}
	resume_accept();
}

struct answer {
	long long id, code;
	int allow, waiting;
	char *error;
	long long program;
	struct strings script;
	int nul;
};

static int answer_member(void *ctx, const char *key, const char *v, const char *end)
{
	struct answer *a = ctx;
	if (!strcmp(key, "answer"))
		return read_int(v, end, 0, LLONG_MAX, &a->id);
	if (!strcmp(key, "code"))
		return read_int(v, end, 0, 255, &a->code);
	if (!strcmp(key, "allow"))
		return read_bool(v, end, &a->allow);
	if (!strcmp(key, "waiting"))
		return read_bool(v, end, &a->waiting);
	if (!strcmp(key, "program"))
		return read_int(v, end, 0, 1 << 20, &a->program);
	if (!strcmp(key, "error"))
		return read_text(v, end, &a->error, &a->nul);
	if (!strcmp(key, "script"))
		return read_list(v, end, &a->script, &a->nul);
	return 0;
}

/* rules_message applies what the host sends on the rules channel: a
 * ruled program's copy, or the answer to a stub's call. */
static void rules_message(void)
{
	int fds[MAX_FDS], nfds;
	size_t len;
	const char *err;
	char *msg = receive(agent.rules, &len, fds, &nfds, &err);
	if (!msg) {
		if (err) {
			close(agent.rules); /* leaves the epoll set */
			agent.rules = -1;
			/* nobody will answer the calls waiting: refuse them */
			struct conn *next;
			for (struct conn *c = agent.conns; c; c = next) {
				next = c->next;
				if (c->stub && c->ask && !c->pid) {
					stub_reply(c, 126, "warden stopped answering for this session's command rules; nothing was run", 1);
					drop(c);
				}
			}
		}
		return;
	}
	struct answer a = {.code = 126};
	if (json_whole(msg, len) || json_for_each_member(msg, msg + len, &a, answer_member)) {
		free(msg);
		close_fds(fds, nfds);
		free(a.error);
		strings_free(&a.script);
		return;
	}
	free(msg);
	if (a.program > 0 && a.program <= 64 && nfds == 1) {
		if (agent.memfds[a.program - 1] >= 0)
			close(agent.memfds[a.program - 1]);
		agent.memfds[a.program - 1] = fds[0];
		free(a.error);
		strings_free(&a.script);
		return;
	}
	if (a.program > 0 && a.program <= 64 && nfds == 0 && !a.nul && a.script.n > 1 && a.script.v[0][0] == '/') {
		strings_free(&agent.scripts[a.program - 1]);
		agent.scripts[a.program - 1] = a.script;
		free(a.error);
		return;
	}
	strings_free(&a.script);
	close_fds(fds, nfds);
	struct conn *c;
	for (c = agent.conns; c && !(c->stub && c->ask == (unsigned)a.id && !c->pid); c = c->next) {
	}
	if (!c) {
		free(a.error);
		return;
	}
	if (a.waiting) {
		stub_reply(c, 0, a.error ? a.error : "", 0);
		free(a.error);
		return;
	}
	c->ask = 0;
	if (!a.allow) {
		stub_reply(c, (int)a.code, a.error ? a.error : "denied by warden's command rules", 1);
		free(a.error);
		drop(c);
		return;
	}
	free(a.error);
	struct event ev = {0};
	int master = -1;
	/* No leftover kill at its end (c->stdio stays empty): its stdio are
	 * its caller's in the sandbox, still running and holding them. */
	pid_t pid = start_ruled(&agent.cfg, &c->req, c->fds, 3, &master, &ev, c->prog);
	close_fds_of(c);
	if (!pid) {
		send_event(c->fd, &ev, -1);
		free(ev.error.p);
		drop(c);
		return;
	}
	c->pid = pid;
}

/* stub_gone: a stub that goes away while it waits takes back its call. */
static void stub_gone(struct conn *c)
{
	int fds[MAX_FDS], nfds;
	size_t len;
	const char *err;
	char *msg = receive(c->fd, &len, fds, &nfds, &err);
	close_fds(fds, nfds);
	free(msg); /* a signal before the program runs: nothing to signal */
	if (msg || !err)
		return;
	if (agent.rules >= 0 && c->ask) {
		struct buf b = {0};
		buf_puts(&b, "{\"cancel\":");
		json_put_int(&b, c->ask);
		buf_puts(&b, "}");
		if (!b.failed)
			wire_send(agent.rules, b.p, b.len, NULL, 0);
		free(b.p);
	}
	drop(c);
}

/* ---- egress under gVisor: the proxy's port, relayed to the host ------- */

/* Under gVisor the host cannot put a listener into the sandbox's network
 * stack, and the sandbox must not reach the host's sockets. So the agent
 * listens on the proxy's address inside (--egress, before any command
 * runs) and relays each connection to the host's egress proxy through a
 * unix stream socket the host made and passed in beforehand: the host
 * keeps a few ready on its egress channel (a connection that opened with
 * {"egress": true}), each as {"upstream": N} with one descriptor, and
 * sends another for each the agent reports {"used": N}. The proxy on the
 * other end checks every connection as it does a container's. */

#define RELAY_BUF (16 << 10)
#define MAX_RELAYS 256

struct relay_end {
	struct relay *r;
	int side;
};

struct relay {
	int fd[2];                /* 0: the sandbox's end (a TCP connection, a terminal's master), 1: the host's */
	int sock[2];              /* fd[i] is a socket (else read and write it) */
	struct relay_end end[2];  /* their epoll tags */
	size_t len[2], off[2];    /* buf[d]: read from fd[d], not yet written to fd[1 - d] */
	int eof[2], shut[2];      /* fd[d] said EOF; fd[1 - d] was shut for writing */
	struct relay *next;
	char buf[2][RELAY_BUF];
};

static void egress_watch(void)
{
	if (agent.egress_listener < 0)
		return;
	int want = agent.nspares > 0 && agent.nrelays < MAX_RELAYS;
	if (want == !agent.egress_paused)
		return;
	struct epoll_event e = {.events = want ? EPOLLIN : 0, .data.ptr = &egress_listener_tag};
	if (epoll_ctl(agent.epoll, EPOLL_CTL_MOD, agent.egress_listener, &e) == 0)
		agent.egress_paused = !want;
}

static void close_spares(void)
{
	for (int i = 0; i < agent.nspares; i++)
		close(agent.spares[i].fd);
	agent.nspares = 0;
}

static void close_egress(void)
{
	if (agent.egress >= 0)
		close(agent.egress); /* leaves the epoll set */
	agent.egress = -1;
	close_spares();
	egress_watch();
}

static void relay_close(struct relay *r)
{
	for (struct relay **p = &agent.relays; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			break;
		}
	}
	for (struct conn *c = agent.conns; c; c = c->next)
		if (c->term == r)
			c->term = NULL;
	close(r->fd[0]);
	close(r->fd[1]);
	free(r);
	agent.nrelays--;
	egress_watch();
}

/* relay_pump moves what it can both ways until every read and write
 * would wait (the descriptors are non-blocking and watched edge-triggered)
 * and passes an EOF on as a half close. A read that fails ends its way as
 * an EOF does (a terminal's master says EIO once the command's side is
 * closed); a write that fails drops that way's data. The relay ends when
 * both ways are done. */
static void relay_pump(struct relay *r)
{
	for (int d = 0; d < 2; d++) {
		int from = r->fd[d], to = r->fd[1 - d];
		for (;;) {
			if (r->off[d] < r->len[d]) {
				const char *p = r->buf[d] + r->off[d];
				size_t left = r->len[d] - r->off[d];
				ssize_t n = r->sock[1 - d] ? send(to, p, left, MSG_NOSIGNAL | MSG_DONTWAIT) : write(to, p, left);
				if (n > 0) {
					r->off[d] += (size_t)n;
					if (r->off[d] == r->len[d])
						r->off[d] = r->len[d] = 0;
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				r->off[d] = r->len[d] = 0;
				r->eof[d] = r->shut[d] = 1;
				break;
			}
			if (r->eof[d]) {
				if (!r->shut[d]) {
					if (r->sock[1 - d])
						shutdown(to, SHUT_WR);
					r->shut[d] = 1;
				}
				break;
			}
			ssize_t n = r->sock[d] ? recv(from, r->buf[d], RELAY_BUF, MSG_DONTWAIT) : read(from, r->buf[d], RELAY_BUF);
			if (n > 0) {
				r->len[d] = (size_t)n;
				r->off[d] = 0;
				continue;
			}
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			r->eof[d] = 1;
		}
	}
	if (r->shut[0] && r->shut[1])
		relay_close(r);
}

/* relay_of_live is r if it is still open. */
static struct relay *relay_of_live(struct relay *r)
{
	for (struct relay *x = agent.relays; x; x = x->next)
		if (x == r)
			return r;
	return NULL;
}

static int is_socket(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* relay_start relays between a (the sandbox's end) and b (the host's),
 * taking both, and returns the relay while it lasts; it fails (NULL),
 * closing them, when the relay cannot be made. */
static struct relay *relay_start(int a, int b)
{
	struct relay *r = malloc(sizeof *r);
	if (!r) {
		close(a);
		close(b);
		return NULL;
	}
	*r = (struct relay){.fd = {a, b}, .sock = {is_socket(a), is_socket(b)}, .next = agent.relays};
	agent.relays = r;
	agent.nrelays++;
	for (int i = 0; i < 2; i++) {
		fcntl(r->fd[i], F_SETFL, fcntl(r->fd[i], F_GETFL) | O_NONBLOCK);
		r->end[i] = (struct relay_end){.r = r, .side = i};
		struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &r->end[i]};
		if (epoll_ctl(agent.epoll, EPOLL_CTL_ADD, r->fd[i], &e) < 0) {
			relay_close(r);
			return NULL;
		}
	}
	relay_pump(r);
	return relay_of_live(r);
}

static void send_used(long long id)
{
	char msg[48];
	int n = snprintf(msg, sizeof msg, "{\"used\":%lld}", id);
	if (agent.egress >= 0 && wire_send(agent.egress, msg, (size_t)n, NULL, 0) < 0)
		close_egress();
}

/* egress_accept pairs each waiting connection with a ready upstream. */
static void egress_accept(void)
{
	while (agent.nspares > 0 && agent.nrelays < MAX_RELAYS) {
		int fd = accept4(agent.egress_listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break; /* EAGAIN; out of descriptors: a relay's end frees some */
		}
		struct spare up = agent.spares[--agent.nspares];
		send_used(up.id);
		relay_start(fd, up.fd);
	}
	egress_watch();
}

/* egress_channel makes c the host's egress channel (a newer one replaces
 * it: a restarted daemon, whose upstreams the old one's are not). */
static void egress_channel(struct conn *c)
{
	for (struct conn **p = &agent.conns; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	epoll_ctl(agent.epoll, EPOLL_CTL_DEL, c->fd, NULL);
	close_egress();
	agent.egress = c->fd;
	free(c);
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = &egress_tag};
	if (epoll_ctl(agent.epoll, EPOLL_CTL_ADD, agent.egress, &e) < 0)
		close_egress();
	resume_accept();
}

/* egress_message takes an upstream the host passes in. */
static void egress_message(void)
{
	int fds[MAX_FDS], nfds;
	size_t len;
	const char *err;
	struct request r;
	char *msg = receive(agent.egress, &len, fds, &nfds, &err);
	if (!msg) {
		if (err)
			close_egress();
		return;
	}
	int ok = agent_parse_request(msg, len, &r) == 0 && r.upstream > 0 && nfds == 1 &&
		 agent.nspares < (int)(sizeof agent.spares / sizeof agent.spares[0]);
	long long id = r.upstream;
	free(msg);
	agent_free_request(&r);
	if (!ok) {
		close_fds(fds, nfds);
		return;
	}
	fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
	agent.spares[agent.nspares++] = (struct spare){.fd = fds[0], .id = id};
	egress_watch();
}

/* egress_listen makes the proxy's listener, unwatched until an upstream is
 * ready: made before any command runs, so none can take the port. */
static void egress_listen(const char *addr)
{
	char host[64];
	unsigned port = 0;
	int used = 0;
	struct sockaddr_in a = {.sin_family = AF_INET};
	if (sscanf(addr, "%63[0-9.]:%u%n", host, &port, &used) != 2 || addr[used] || port == 0 || port > 65535 ||
	    inet_pton(AF_INET, host, &a.sin_addr) != 1)
		fatal("agent: --egress: want IPV4:PORT", addr);
	a.sin_port = htons((unsigned short)port);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0)
		fatal("agent: egress listener", strerror(errno));
	struct epoll_event e = {.events = 0, .data.ptr = &egress_listener_tag};
	if (epoll_ctl(agent.epoll, EPOLL_CTL_ADD, fd, &e) < 0)
		fatal("agent: egress listener", strerror(errno));
	agent.egress_listener = fd;
	agent.egress_paused = 1;
}

/* relay_of is the relay whose end tag is, if any. */
static struct relay_end *relay_of(void *tag)
{
	for (struct relay *r = agent.relays; r; r = r->next)
		if (tag == &r->end[0] || tag == &r->end[1])
			return tag;
	return NULL;
}

static void kill_all(struct conn *c);
/* GVISOR_LATE_DIR is a pooled gVisor sandbox's staging folder
 * (runtime/sandbox: gvisorLateDir). */
#define GVISOR_LATE_DIR "/dev/.warden-late"

static void load_seccomp(const char *path);

/* cap_bounding is the bounding set, from /proc/self/status (one read
 * where a PR_CAPBSET_READ per capability costs gVisor a system call each). */
static int cap_bounding(unsigned long long *set)
{
	char text[4096];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	text[n] = 0;
	char *p = strstr(text, "\nCapBnd:");
	if (!p || sscanf(p + 8, "%llx", set) != 1) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* drop_caps gives up every capability for good: the bounding set, the
 * ambient, inheritable, permitted and effective sets, checked after. */
static int drop_caps(void)
{
	zygote_retire(); /* made with the capabilities this drops */
	unsigned long long bnd;
	if (cap_bounding(&bnd) < 0)
		return -1;
	for (int c = 0; c < 64; c++)
		if ((bnd >> c & 1) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
			return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -1;
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {0};
	if (syscall(SYS_capset, &h, d) < 0 || syscall(SYS_capget, &h, d) < 0 || cap_bounding(&bnd) < 0)
		return -1;
	if (bnd || d[0].effective || d[0].permitted || d[0].inheritable || d[1].effective || d[1].permitted ||
	    d[1].inheritable) {
		errno = EPERM;
		return -1;
	}
	return 0;
}

/* gvisor_claim takes a pooled gVisor sandbox's session folders, once: the
 * host mounted each under the staging folder, at its own path, in the
 * gofer's view; the agent binds it at that path in gVisor's kernel with
 * its flags, unmounts the staging folder, gives up CAP_SYS_ADMIN (held
 * for this alone) and loads the filter that refuses again the calls the
 * claim needed (runtime/sandbox: claimSeccomp; the policy's filter less
 * those was loaded at start: gVisor takes ~10 ms to load a whole one, and
 * ~7 ms for this one, which load_claim_filter loads once the claim has its
 * answer). Until all of it is done no command runs (seal). */
static int gvisor_claim(const struct strings *binds, struct event *ev)
{
	char src[PATH_MAX];
	for (int i = 0; i < binds->n; i++) {
		const char *b = binds->v[i], *path = strchr(b, ':');
		if (!path || path[1] != '/' || snprintf(src, sizeof src, "%s%s", GVISOR_LATE_DIR, path + 1) >= (int)sizeof src) {
			set_error(ev, 125, "claim: bad bind ", b, NULL);
			return -1;
		}
		path++;
		unsigned long flags = MS_BIND | MS_REMOUNT;
		struct strings f = {0};
		char *list = strndup(b, (size_t)(path - 1 - b));
		if (!list) {
			set_error(ev, 125, "claim: out of memory", NULL, NULL);
			return -1;
		}
		split_on(&f, list, ',');
		free(list);
		for (int j = 0; j < f.n; j++) {
			unsigned long one = !strcmp(f.v[j], "ro") ? MS_RDONLY : !strcmp(f.v[j], "nosuid") ? MS_NOSUID :
					    !strcmp(f.v[j], "noexec")                         ? MS_NOEXEC : 0;
			if (!one) {
				set_error(ev, 125, "claim: bad bind ", b, NULL);
				strings_free(&f);
				return -1;
			}
			flags |= one;
		}
		strings_free(&f);
		/* Both ends where they are named, through no symbolic link (a
		 * workspace's own could lead one elsewhere in the sandbox). */
		char *real_src = realpath(src, NULL), *real_path = realpath(path, NULL);
		int same = real_src && real_path && !strcmp(real_src, src) && !strcmp(real_path, path);
		free(real_src);
		free(real_path);
		if (!same) {
			set_error(ev, 125, "claim: ", path, " is not a folder of its own (a symbolic link on its way?)");
			return -1;
		}
		if (mount(src, path, NULL, MS_BIND, NULL) < 0 || mount(NULL, path, NULL, flags, NULL) < 0) {
			set_error(ev, 125, "claim: bind ", path, NULL);
			buf_puts(&ev->error, ": ");
			buf_puts(&ev->error, strerror(errno));
			return -1;
		}
	}
	/* The claim's filter is in the staging folder: opened before it goes. */
	int filter = agent.seccomp_claim ? open(agent.seccomp_claim, O_RDONLY | O_CLOEXEC) : -1;
	if (agent.seccomp_claim && filter < 0) {
		set_error(ev, 125, "claim: seccomp filter: ", strerror(errno), NULL);
		return -1;
	}
	/* Under gVisor's own /dev, so nothing of the gofer's view is left
	 * at its path once unmounted: its mountpoint, gVisor's, goes too. */
	if (umount2(GVISOR_LATE_DIR, MNT_DETACH) < 0 || rmdir(GVISOR_LATE_DIR) < 0) {
		int e = errno;
		if (filter >= 0)
			close(filter);
		set_error(ev, 125, "claim: unmount " GVISOR_LATE_DIR ": ", strerror(e), NULL);
		return -1;
	}
	if (drop_caps() < 0) {
		int e = errno;
		if (filter >= 0)
			close(filter);
		set_error(ev, 125, "claim: drop capabilities: ", strerror(e), NULL);
		return -1;
	}
	agent.claim_filter = filter;
	agent.claimed = 1;
	return 0;
}

/* load_claim_filter loads the claim's filter right after the claim's
 * answer is sent, before the agent takes any other message: no command
 * runs without it (a failure ends the agent, and with it the sandbox). */
static void load_claim_filter(void)
{
	if (agent.claim_filter < 0)
		return;
	char fd_path[32];
	snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", agent.claim_filter);
	load_seccomp(fd_path);
	close(agent.claim_filter);
	agent.claim_filter = -1;
}

/* commands_running says a command started by the host is running. */
static int commands_running(void)
{
	for (struct conn *c = agent.conns; c; c = c->next)
		if (c->pid)
			return 1;
	return 0;
}

/* serve handles a connection's first message: a seal or a command. */
static void serve(struct conn *c)
{
	int fds[MAX_FDS], nfds;
	size_t len;
	const char *err;
	struct event ev = {0};
	struct request r;
	char *msg = receive(c->fd, &len, fds, &nfds, &err);
	if (!msg && !err)
		return;
	if (!msg || agent_parse_request(msg, len, &r)) {
		if (msg) {
			close_fds(fds, nfds);
			agent_free_request(&r);
		}
		set_error(&ev, 125, "bad request: ", msg ? "malformed message: not a valid request" : err, NULL);
		free(msg);
		send_event(c->fd, &ev, -1);
		free(ev.error.p);
		drop(c);
		return;
	}
	free(msg);
	if (r.rules && !c->stub) {
		close_fds(fds, nfds);
		agent_free_request(&r);
		rules_channel(c);
		return;
	}
	/* Answered from the loop, so only once the ruleset is filled: a
	 * pooled sandbox counts as ready from then on. Nothing is sealed. */
	if (r.ready && !c->stub) {
		close_fds(fds, nfds);
		agent_free_request(&r);
		if (agent.broken)
			set_error(&ev, 125, "landlock: ", agent.why.p ? agent.why.p : "out of memory", NULL);
		send_event(c->fd, &ev, -1);
		free(ev.error.p);
		drop(c);
		return;
	}
	if (r.killall && !c->stub && agent.gvisor) {
		close_fds(fds, nfds);
		agent_free_request(&r);
		kill_all(c);
		return;
	}
	if (r.egress && !c->stub && agent.egress_listener >= 0) {
		close_fds(fds, nfds);
		agent_free_request(&r);
		egress_channel(c);
		return;
	}
	if (c->stub) {
		stub_call(c, &r, fds, nfds);
		return;
	}
	pid_t pid = 0;
	int master = -1;
	/* gVisor's terminals cannot leave it: for -t the host passes one end
	 * of a socket, which the agent relays to the master side. */
	int host = -1;
	if (agent.gvisor && r.tty) {
		if (nfds == 1)
			host = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
		if (host < 0)
			set_error(&ev, 125, "terminal: ", "under gVisor the host's end of the terminal must come with the request", NULL);
	}
	/* A pooled gVisor sandbox takes its session's folders at its seal. */
	if (r.seal && agent.gvisor && agent.cfg.pooled && !agent.claimed)
		gvisor_claim(&r.binds, &ev);
	/* A pooled sandbox seals before its first command at the latest. */
	if ((!agent.gvisor || !r.tty || host >= 0) && seal(&ev) == 0 && !r.seal)
		pid = start(&agent.cfg, &r, fds, nfds, &master, &ev);
	if (pid) {
		stdio_files_of(fds, r.tty ? 0 : nfds, master, &c->stdio);
		agent.last_start = monotonic_ms();
		agent.started = 1;
	}
	close_fds(fds, nfds);
	agent_free_request(&r);
	if (!pid && host >= 0)
		close(host);
	if (!pid) {
		send_event(c->fd, &ev, -1);
		free(ev.error.p);
		drop(c);
		load_claim_filter();
		return;
	}
	c->pid = pid;
	/* Only a terminal needs a message at start (its master side);
	 * without one, the single reply is how the command ended. */
	if (master >= 0) {
		struct event started = {.started = 1, .pid = pid};
		if (host >= 0) {
			send_event(c->fd, &started, -1);
			c->term = relay_start(master, host);
		} else {
			send_event(c->fd, &started, master);
			close(master);
		}
	}
}

/* control applies what the client sends while a command runs. A client
 * that goes away takes its command's process tree with it. */
static void control(struct conn *c)
{
	int fds[MAX_FDS], nfds;
	size_t len;
	const char *err;
	struct control ctl;
	char *msg = receive(c->fd, &len, fds, &nfds, &err);
	close_fds(fds, nfds);
	if (!msg && !err)
		return;
	if (!msg || agent_parse_control(msg, len, &ctl)) {
		kill(-c->pid, SIGKILL);
		stop_reading(c);
	} else if (ctl.kill) {
		kill(-c->pid, SIGKILL);
	} else if (ctl.signal > 0 && ctl.signal < 65) {
		kill(-c->pid, (int)ctl.signal);
	} else if (ctl.rows > 0 && ctl.cols > 0 && c->term) {
		/* a terminal the agent relays (gVisor); a passed one's master
		 * side is resized by the client */
		struct winsize ws = {.ws_row = (unsigned short)ctl.rows, .ws_col = (unsigned short)ctl.cols};
		ioctl(c->term->fd[0], TIOCSWINSZ, &ws);
	}
	free(msg);
}

/* How long a command runs before the agent clones the next one's process
 * beside it: the clone holds the agent for its milliseconds, and a short
 * command's end would wait for it. Once the commands have ended it is made
 * at once, while the caller handles the last one's end. */
#define ZYGOTE_AFTER_MS 50

/* zygote_due: in how many ms the process kept ready is to be made (0:
 * now), or -1 for not (there is one; the session has run no command yet,
 * so an idle sandbox costs no more memory than it did; or the agent's
 * filters and capabilities are not final yet: before the seal, a pooled
 * sandbox's claim filter). */
static int zygote_due(void)
{
	if (!agent.gvisor || zygote.pid > 0 || zygote.failed || !agent.started || !agent.sealed ||
	    agent.claim_filter >= 0 || agent.broken)
		return -1;
	for (struct conn *c = agent.conns; c; c = c->next)
		if (c->pid) {
			long long left = agent.last_start + ZYGOTE_AFTER_MS - monotonic_ms();
			return left > 0 ? (int)left : 0;
		}
	return 0;
}

/* running_command: pid is a command's that still runs. */
static int running_command(pid_t pid)
{
	if (pid == zygote.pid && pid > 0)
		return 1; /* the process kept ready holds nothing of a command's */
	for (struct conn *c = agent.conns; c; c = c->next)
		if (c->pid == pid)
			return 1;
	return 0;
}

/* kill_leftovers kills what c's ended command left holding its caller's
 * stdio, before the caller hears of the end. A file that another running
 * command has as its own stdio too (a caller passed the same pipe to
 * both) is spared with it. */
static void kill_leftovers(struct conn *c)
{
	struct stdio_files files = {.n = 0};
	for (int i = 0; i < c->stdio.n; i++) {
		int shared = 0;
		for (struct conn *o = agent.conns; o; o = o->next)
			for (int j = 0; o != c && o->pid && j < o->stdio.n; j++)
				shared |= o->stdio.v[j].dev == c->stdio.v[i].dev && o->stdio.v[j].ino == c->stdio.v[i].ino;
		if (!shared)
			files.v[files.n++] = c->stdio.v[i];
	}
	c->pid = 0;
	leftover_kill(&files, running_command, zygote.pid);
}

/* reap collects every child, its own commands and reparented orphans,
 * and tells each command's client how it ended. */
static void reap(void)
{
	struct signalfd_siginfo si;
	while (read(agent.sigfd, &si, sizeof si) > 0) {
	}
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (zygote_gone(pid))
			continue;
		zygote.failed = 0; /* a process ended: room for one again */
		for (struct conn *c = agent.conns; c; c = c->next) {
			if (c->pid != pid)
				continue;
			struct event ev = {.exited = 1};
			if (WIFSIGNALED(status)) {
				ev.signal = WTERMSIG(status);
				ev.code = 128 + ev.signal;
			} else {
				ev.code = WEXITSTATUS(status);
			}
			kill_leftovers(c);
			send_event(c->fd, &ev, -1);
			drop(c);
			break;
		}
	}
}

/* others counts the sandbox's processes but the agent; alive leaves out
 * the zombies. */
static int others(int *alive)
{
	DIR *d = opendir("/proc");
	int n = 0;
	*alive = 0;
	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d));) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 1)
			continue;
		n++;
		char path[64], text[512];
		snprintf(path, sizeof path, "/proc/%ld/stat", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t len = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
		if (fd >= 0)
			close(fd);
		if (len <= 0)
			continue;
		text[len] = 0;
		char *paren = strrchr(text, ')');
		if (paren && paren[1] == ' ' && paren[2] != 'Z')
			(*alive)++;
	}
	closedir(d);
	return n;
}

/* kill_all kills every process of the sandbox but the agent (the host's
 * `session kill` under gVisor, where the host cannot signal them one by
 * one), until none is left, reporting each command's end, and answers how
 * many there were. gVisor's kill(-1) spares the sandbox's init, as Linux's
 * does. */
static void kill_all(struct conn *c)
{
	zygote_retire(); /* the agent's own, not counted */
	int alive, killed = 0;
	long long deadline = monotonic_ms() + 5000;
	for (;;) {
		int n = others(&alive);
		if (killed == 0)
			killed = n;
		if (alive == 0)
			break;
		kill(-1, SIGKILL);
		reap();
		if (monotonic_ms() > deadline)
			break;
		struct timespec ms = {.tv_nsec = 1000000};
		nanosleep(&ms, NULL);
	}
	reap();
	char msg[64];
	int len = alive ? snprintf(msg, sizeof msg, "{\"killed\":%d,\"left\":%d}", killed, alive)
			: snprintf(msg, sizeof msg, "{\"killed\":%d}", killed);
	wire_send(c->fd, msg, (size_t)len, NULL, 0);
	drop(c);
}

static void accept_all(int listener, int stub)
{
	for (;;) {
		int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			/* Out of descriptors or memory, the pending client stays
			 * queued and the listener readable: stop watching it until
			 * a connection ends, rather than spin. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				struct epoll_event e = {.events = 0, .data.ptr = stub ? &stub_tag : &listener_tag};
				if (epoll_ctl(agent.epoll, EPOLL_CTL_MOD, listener, &e) == 0) {
					agent.accept_paused |= stub ? 2 : 1;
					agent.paused_at = monotonic_ms();
				}
			}
			return;
		}
		struct conn *c = calloc(1, sizeof *c);
		struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
		if (!c || epoll_ctl(agent.epoll, EPOLL_CTL_ADD, fd, &e) < 0) {
			close(fd);
			free(c);
			continue;
		}
		c->fd = fd;
		c->stub = stub;
		c->reading = 1;
		c->next = agent.conns;
		agent.conns = c;
		if (agent.listen) {
			unlink(agent.listen);
			agent.listen = NULL;
		}
	}
}

static void ignore(int sig) { (void)sig; }

/* set_rlimits applies --rlimits NAME=SOFT:HARD,... (names as in RLIMIT_NAME,
 * lower case) to the agent, and so to every command it starts. The engine
 * cannot: it sets them from the host with prlimit, which needs
 * CAP_SYS_RESOURCE over the sandbox's user namespace, and that namespace
 * is owned by the sandbox's own uid, not root. Lowering a limit, or a soft
 * one up to its hard one, needs nothing. */
static void set_rlimits(const char *list)
{
	static const struct {
		const char *name;
		int resource;
	} names[] = {
		{"nofile", RLIMIT_NOFILE},         {"core", RLIMIT_CORE},       {"sigpending", RLIMIT_SIGPENDING},
		{"msgqueue", RLIMIT_MSGQUEUE},     {"memlock", RLIMIT_MEMLOCK}, {"nproc", RLIMIT_NPROC},
		{"fsize", RLIMIT_FSIZE},           {"stack", RLIMIT_STACK},     {"as", RLIMIT_AS},
		{"cpu", RLIMIT_CPU},               {"data", RLIMIT_DATA},       {"locks", RLIMIT_LOCKS},
		{"nice", RLIMIT_NICE},             {"rtprio", RLIMIT_RTPRIO},   {"rttime", RLIMIT_RTTIME},
		{"rss", RLIMIT_RSS},
	};
	struct strings items = {0};
	split_on(&items, list, ',');
	for (int i = 0; i < items.n; i++) {
		char name[16];
		unsigned long long soft, hard;
		int used = 0;
		if (sscanf(items.v[i], "%15[a-z]=%llu:%llu%n", name, &soft, &hard, &used) != 3 || items.v[i][used])
			fatal("agent: --rlimits: want NAME=SOFT:HARD", items.v[i]);
		size_t k = 0;
		while (k < sizeof names / sizeof names[0] && strcmp(names[k].name, name))
			k++;
		if (k == sizeof names / sizeof names[0])
			fatal("agent: --rlimits: unknown limit", name);
		struct rlimit rl = {.rlim_cur = soft, .rlim_max = hard};
		if (setrlimit(names[k].resource, &rl) < 0)
			fatal("agent: setrlimit", items.v[i]);
	}
	strings_free(&items);
}

/* parse_stubs reads --stubs N=PATH:N=PATH... (runtime/sandbox). */
static void parse_stubs(struct agent_config *cfg, const char *value)
{
	struct strings items = {0};
	split(&items, value);
	cfg->stub_prog = calloc((size_t)items.n + 1, sizeof *cfg->stub_prog);
	if (!cfg->stub_prog)
		fatal("agent", "out of memory");
	for (int i = 0; i < items.n; i++) {
		int n, used = 0;
		if (sscanf(items.v[i], "%d=%n", &n, &used) != 1 || used == 0 || n < 0 || n >= 64 || items.v[i][used] != '/')
			fatal("agent: --stubs: want N=PATH", items.v[i]);
		cfg->stub_prog[cfg->stubs.n] = n;
		strings_add(&cfg->stubs, items.v[i] + used);
	}
	strings_free(&items);
}

/* stub_listen makes the socket the stubs call: abstract, so in the
 * sandbox's own network namespace, and made before any command runs. */
static void stub_listen(void)
{
	if (agent.cfg.stubs.n == 0)
		return;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path + 1, STUB_SOCKET, sizeof STUB_SOCKET - 1);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + sizeof STUB_SOCKET);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, len) < 0 || listen(fd, 128) < 0)
		fatal("agent: stub socket", strerror(errno));
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = &stub_tag};
	if (epoll_ctl(agent.epoll, EPOLL_CTL_ADD, fd, &e) < 0)
		fatal("agent", strerror(errno));
	agent.stub_listener = fd;
}

static void parse_flags(int argc, char **argv)
{
	struct agent_config *cfg = &agent.cfg;
	const char *hidden = NULL;
	cfg->allow_all = 1;
	for (int i = 2; i < argc; i++) {
		char name[32];
		const char *value;
		if (argv[i][0] != '-' || cli_flag(argv[i], name, sizeof name, &value))
			fatal("agent: unexpected argument", argv[i]);
		if (!strcmp(name, "pooled")) {
			cfg->pooled = !value || !strcmp(value, "true") || !strcmp(value, "1");
			continue;
		}
		if (!strcmp(name, "gvisor") && !value) {
			agent.gvisor = 1;
			continue;
		}
		if (strcmp(name, "exec-allow") && strcmp(name, "writable") && strcmp(name, "exec-dirs") &&
		    strcmp(name, "hidden-programs") && strcmp(name, "rlimits") && strcmp(name, "stubs") &&
		    strcmp(name, "listen") && strcmp(name, "seccomp") && strcmp(name, "egress") &&
		    strcmp(name, "seccomp-claim"))
			fatal("agent: flag provided but not defined", argv[i]);
		if (!value && ++i >= argc)
			fatal("agent: flag needs an argument", name);
		if (!value)
			value = argv[i];
		if (!strcmp(name, "exec-allow")) {
			cfg->allow_all = 0;
			strings_free(&cfg->allow);
			split(&cfg->allow, value);
		} else if (!strcmp(name, "writable")) {
			strings_free(&cfg->writable);
			split(&cfg->writable, value);
		} else if (!strcmp(name, "exec-dirs")) {
			strings_free(&cfg->exec_dirs);
			split(&cfg->exec_dirs, value);
		} else if (!strcmp(name, "rlimits")) {
			set_rlimits(value);
		} else if (!strcmp(name, "listen")) {
			agent.listen = value;
		} else if (!strcmp(name, "seccomp")) {
			agent.seccomp = value;
		} else if (!strcmp(name, "seccomp-claim")) {
			agent.seccomp_claim = value;
		} else if (!strcmp(name, "egress")) {
			agent.egress_addr = value;
		} else if (!strcmp(name, "stubs")) {
			parse_stubs(cfg, value);
		} else {
			hidden = value;
		}
	}
	if (hidden && *hidden) {
		FILE *f = fopen(hidden, "re");
		if (!f) {
			char text[128];
			struct buf b = {0};
			buf_puts(&b, "open ");
			buf_puts(&b, hidden);
			buf_puts(&b, ": ");
			buf_puts(&b, go_error(errno, text, sizeof text));
			fatal(b.p, NULL);
		}
		char *line = NULL;
		size_t cap = 0;
		ssize_t n;
		while ((n = getline(&line, &cap, f)) >= 0) {
			if (n > 0 && line[n - 1] == '\n')
				line[--n] = 0;
			if (n > 0)
				strings_add(&cfg->hidden, line);
		}
		free(line);
		fclose(f);
	}
	if (cfg->allow.failed || cfg->writable.failed || cfg->exec_dirs.failed || cfg->hidden.failed)
		fatal("agent", "out of memory");
	if (agent.listen && !agent.gvisor)
		fatal("agent: --listen is for --gvisor, where no listener can be passed in", NULL);
	if (agent.gvisor && !agent.listen)
		fatal("agent: --gvisor needs --listen PATH", NULL);
	if (agent.seccomp && !agent.gvisor)
		fatal("agent: --seccomp is for --gvisor, whose runtime loads no filter", NULL);
	if (agent.egress_addr && !agent.gvisor)
		fatal("agent: --egress is for --gvisor; a container's proxy listener is made by the host", NULL);
	if (agent.seccomp_claim && !(agent.gvisor && cfg->pooled && agent.seccomp))
		fatal("agent: --seccomp-claim is for a pooled --gvisor agent with --seccomp", NULL);
}

/* load_seccomp loads the sandbox's seccomp filter (a BPF program the host
 * compiled from the policy) on the agent, and so on every command it
 * starts: under gVisor, which applies no filter of its own to them. */
static void load_seccomp(const char *path)
{
	zygote_retire(); /* made under the filters before this one */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		fatal("agent: seccomp filter", strerror(errno));
	size_t n = (size_t)st.st_size;
	if (n == 0 || n % sizeof(struct sock_filter) || n / sizeof(struct sock_filter) > BPF_MAXINSNS)
		fatal("agent: seccomp filter: not a BPF program", path);
	struct sock_filter *insns = malloc(n);
	size_t got = 0;
	while (insns && got < n) {
		ssize_t r = read(fd, (char *)insns + got, n - got);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			fatal("agent: seccomp filter: short read", path);
		}
		got += (size_t)r;
	}
	close(fd);
	if (!insns)
		fatal("agent", "out of memory");
	struct sock_fprog prog = {.len = (unsigned short)(n / sizeof(struct sock_filter)), .filter = insns};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		fatal("agent: load the seccomp filter", strerror(errno));
	free(insns);
}

/* listen_at binds the agent's socket at path and makes it LISTENER_FD. */
static void listen_at(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof a.sun_path)
		fatal("agent: --listen path is too long", path);
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0)
		fatal("agent: listen", strerror(errno));
	if (fd != LISTENER_FD && (dup3(fd, LISTENER_FD, O_CLOEXEC) < 0 || close(fd) < 0))
		fatal("agent: listen", strerror(errno));
}

static void run(int argc, char **argv)
{
	parse_flags(argc, argv);
	if (getpid() != 1)
		fatal("the agent runs only as a sandbox's PID 1", NULL);
	/* Its commands run as the same user: a dumpable agent would let them
	 * open /proc/1/mem and take it over (seccomp stops ptrace, not that).
	 * execve makes each command dumpable again. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fatal("agent: prctl(PR_SET_DUMPABLE)", strerror(errno));
	if (agent.listen)
		listen_at(agent.listen);
	int domain = 0;
	socklen_t dlen = sizeof domain;
	if (fcntl(LISTENER_FD, F_SETFD, FD_CLOEXEC) < 0 ||
	    getsockopt(LISTENER_FD, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) < 0)
		fatal("agent listener", strerror(errno));
	if (domain != AF_UNIX)
		fatal("agent listener is not a unix socket", NULL);
	fcntl(LISTENER_FD, F_SETFL, fcntl(LISTENER_FD, F_GETFL) | O_NONBLOCK);

	/* PID 1 of a namespace only dies of what it chooses to; the host
	 * stops it with SIGKILL. These are caught and dropped, not ignored:
	 * an ignored signal stays ignored in every command the agent starts,
	 * while a caught one is reset to its default by execve. */
	struct sigaction sa = {.sa_handler = ignore, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
		sigaction(caught[i], &sa, NULL);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	agent.sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	agent.epoll = epoll_create1(EPOLL_CLOEXEC);
	if (agent.sigfd < 0 || agent.epoll < 0)
		fatal("agent", strerror(errno));
	struct epoll_event el = {.events = EPOLLIN, .data.ptr = &listener_tag};
	struct epoll_event es = {.events = EPOLLIN, .data.ptr = &signal_tag};
	if (epoll_ctl(agent.epoll, EPOLL_CTL_ADD, LISTENER_FD, &el) < 0 ||
	    epoll_ctl(agent.epoll, EPOLL_CTL_ADD, agent.sigfd, &es) < 0)
		fatal("agent", strerror(errno));

	stub_listen();
	if (agent.egress_addr)
		egress_listen(agent.egress_addr);
	if (agent.seccomp)
		load_seccomp(agent.seccomp);
	prepare();
	if (!agent.cfg.pooled) {
		struct event ev = {0};
		if (seal(&ev))
			fatal(ev.error.p, NULL);
	}
	trim();
	for (;;) {
		struct epoll_event events[16];
		/* Paused for want of descriptors, try again every 100 ms even
		 * if no connection ends (another process may free them), however
		 * busy the other events keep the loop. */
		int timeout = -1;
		if (agent.accept_paused) {
			long long left = agent.paused_at + 100 - monotonic_ms();
			timeout = left > 0 ? (int)left : 0;
		}
		int n = -1;
		/* Idle, with its filters final: clone the next command's process
		 * now rather than when a command comes. */
		int due = zygote_due();
		if (due == 0 && (n = epoll_wait(agent.epoll, events, 16, 0)) == 0) {
			zygote_make();
			due = -1;
		}
		/* The spent ruleset is let go once no command runs and the loop
		 * has been idle SPENT_IDLE_MS: freeing its rules (~0.4 ms) then
		 * delays no command, nor the end the host waits for. A claim's
		 * first command follows the seal by a fraction of a millisecond,
		 * and a one-shot sandbox never pays it. */
		int spent_due = -1;
		if (n <= 0 && agent.landlock.spent >= 0 && !commands_running()) {
			long long left = agent.active_at + SPENT_IDLE_MS - monotonic_ms();
			if (left > 0)
				spent_due = (int)left;
			else if ((n = epoll_wait(agent.epoll, events, 16, 0)) == 0) {
				close(agent.landlock.spent);
				agent.landlock.spent = -1;
			}
		}
		if (n <= 0) {
			int t = timeout;
			if (due > 0 && (t < 0 || due < t))
				t = due;
			if (spent_due > 0 && (t < 0 || spent_due < t))
				t = spent_due;
			n = t == 0 ? 0 : epoll_wait(agent.epoll, events, 16, t);
		}
		if (n > 0)
			agent.active_at = monotonic_ms();
		if (n < 0 && errno != EINTR)
			fatal("agent", strerror(errno));
		if (agent.accept_paused && monotonic_ms() >= agent.paused_at + 100)
			resume_accept();
		for (int i = 0; i < n; i++) {
			void *tag = events[i].data.ptr;
			if (tag == &listener_tag)
				accept_all(LISTENER_FD, 0);
			else if (tag == &stub_tag)
				accept_all(agent.stub_listener, 1);
			else if (tag == &signal_tag)
				reap();
			else if (tag == &egress_listener_tag)
				egress_accept();
		}
		/* connections after the reaper: a command that ended has
		 * freed its connection, which a later event may name */
		for (int i = 0; i < n; i++) {
			void *tag = events[i].data.ptr;
			if (tag == &rules_tag) {
				if (agent.rules >= 0)
					rules_message();
				continue;
			}
			if (tag == &egress_tag) {
				if (agent.egress >= 0)
					egress_message();
				continue;
			}
			if (tag == &listener_tag || tag == &signal_tag || tag == &stub_tag || tag == &egress_listener_tag)
				continue;
			/* A relay freed meanwhile is in no list; one made since in
			 * its memory gets a pump it did not need, which is harmless. */
			struct relay_end *end = relay_of(tag);
			if (end) {
				relay_pump(end->r);
				continue;
			}
			struct conn *c;
			for (c = agent.conns; c && c != tag; c = c->next) {
			}
			if (!c || !c->reading)
				continue;
			if (c->pid)
				control(c);
			else if (c->ask)
				stub_gone(c);
			else
				serve(c);
		}
	}
}

__attribute__((constructor)) static void agent_main(int argc, char **argv)
{
	if (argc >= 2 && argv && argv[1] && strcmp(argv[1], "agent") == 0)
		run(argc, argv);
}
