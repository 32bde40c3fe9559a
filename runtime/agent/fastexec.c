// The fast path of `warden exec`: a constructor that runs before the Go
// runtime starts. When the command line is a plain
//
//	warden [--root DIR] exec --session ID [--timeout D] [--env N=V]... [--cwd DIR] [--] CMD...
//
// and a daemon answers on DIR/warden.sock, it sends the request (with the
// caller's stdin, stdout and stderr as SCM_RIGHTS), forwards signals, and
// exits with the command's status, exactly as the Go client would. Anything
// else (a terminal, --policy, --result, an unknown flag, no daemon yet, a malformed
// duration or one below 1ms, a root that is not a plain absolute path)
// returns before a single byte is sent, and the Go CLI handles it. Text
// that is not UTF-8 is refused here as the Go CLI refuses it.
// The same goes for a one-shot run through a warm pool,
//
//	warden [--root DIR] do --policy FILE [--workspace DIR] [--skill-dir DIR] [--data-dir DIR]
//	       [--timeout D] [--env N=V]... [--cwd DIR] [--] CMD...
//
// sent as the do op with the policy file's text and the folders the Go CLI
// would work out (filepath.Abs, $SKILL_DIR the policy file's folder, $HOME).
// When the daemon answers that no pool serves it (not_pooled, or a daemon
// that does not know the op), nothing ran: the constructor returns and the
// Go CLI runs the command cold. WARDEN_ENGINE (which would strengthen the
// policy) leaves a do to the Go CLI.
// WARDEN_FASTPATH=off turns the fast path off.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fastexec.h"
#include "wire.h"

char *fastexec_json_string(const char *s)
{
	struct buf b = {0};
	json_put_string(&b, s);
	if (b.failed) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* fastexec_valid_utf8 is Go's utf8.ValidString: no stray continuation
 * bytes, overlong forms, surrogates or code points above U+10FFFF. */
int fastexec_valid_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned c = *p++;
		if (c < 0x80)
			continue;
		int n;
		unsigned lo = 0x80, hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			n = 1;
		else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			if (c == 0xe0)
				lo = 0xa0; /* overlong */
			else if (c == 0xed)
				hi = 0x9f; /* surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			if (c == 0xf0)
				lo = 0x90; /* overlong */
			else if (c == 0xf4)
				hi = 0x8f; /* above U+10FFFF */
		} else
			return 0;
		for (int i = 0; i < n; i++, p++) {
			if (*p < lo || *p > hi)
				return 0;
			lo = 0x80, hi = 0xbf;
		}
	}
	return 1;
}

/* ---- durations, as Go's time.ParseDuration reads them ---------------- */

/* fastexec_parse_duration reads a Go duration ("1.5s", "2m30s", "500ms")
 * into nanoseconds. It returns 0 on success and -1 for anything Go would
 * refuse or this code does not handle (signs, overflow); the Go CLI then
 * takes over and explains. */
int fastexec_parse_duration(const char *s, int64_t *out)
{
	static const struct {
		const char *name;
		uint64_t ns;
	} units[] = {
		{"ns", 1ULL}, {"us", 1000ULL}, {"\xc2\xb5s", 1000ULL}, {"\xce\xbcs", 1000ULL},
		{"ms", 1000000ULL}, {"s", 1000000000ULL}, {"m", 60000000000ULL}, {"h", 3600000000000ULL},
	};
	const uint64_t max = (uint64_t)INT64_MAX;
	uint64_t total = 0;
	if (!*s)
		return -1;
	if (strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	while (*s) {
		uint64_t whole = 0, frac = 0, scale = 1;
		int digits = 0;
		while (*s >= '0' && *s <= '9') {
			if (whole > (max - 9) / 10)
				return -1;
			whole = whole * 10 + (uint64_t)(*s++ - '0');
			digits++;
		}
		if (*s == '.') {
			s++;
			while (*s >= '0' && *s <= '9') {
				if (scale < 1000000000000000000ULL) { /* more digits add nothing */
					frac = frac * 10 + (uint64_t)(*s - '0');
					scale *= 10;
				}
				s++;
				digits++;
			}
		}
		if (!digits)
			return -1;
		size_t n = 0;
		while (s[n] && s[n] != '.' && (s[n] < '0' || s[n] > '9'))
			n++;
		uint64_t unit = 0;
		for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
			if (strlen(units[i].name) == n && strncmp(s, units[i].name, n) == 0)
				unit = units[i].ns;
		}
		if (!unit)
			return -1;
		s += n;
		if (whole > max / unit)
			return -1;
		uint64_t v = whole * unit;
		/* the fraction, truncated to whole nanoseconds as Go does */
		uint64_t f = (uint64_t)((long double)frac * (long double)unit / (long double)scale);
		if (v > max - f)
			return -1;
		v += f;
		if (total > max - v)
			return -1;
		total += v;
	}
	*out = (int64_t)total;
	return 0;
}

struct reply {
	int has_error, started, has_result, exit_code;
	struct buf error;        /* the reply's own error: warden failed */
	struct buf code;         /* its code */
	struct buf result_error; /* the result's: why the command ended so */
};

static int result_member(void *ctx, const char *key, const char *v, const char *end)
{
	struct reply *r = ctx;
	if (strcmp(key, "exit") == 0) {
		int code = 0, digits = 0;
		for (; v < end && *v >= '0' && *v <= '9' && digits < 4; v++, digits++)
			code = code * 10 + (*v - '0');
		if (!digits || code > 255 || (v < end && *v >= '0' && *v <= '9'))
			return -1;
		r->exit_code = code;
	} else if (strcmp(key, "error") == 0) {
		r->result_error.len = 0;
		if (!json_read_string(v, end, &r->result_error))
			return -1;
	}
	return 0;
}

static int reply_member(void *ctx, const char *key, const char *v, const char *end)
{
	struct reply *r = ctx;
	if (strcmp(key, "error") == 0) {
		r->has_error = 1;
		r->error.len = 0;
		return json_read_string(v, end, &r->error) ? 0 : -1;
	}
	if (strcmp(key, "code") == 0) {
		r->code.len = 0;
		return json_read_string(v, end, &r->code) ? 0 : -1;
	}
	if (strcmp(key, "started") == 0) {
		r->started = end - v >= 4 && strncmp(v, "true", 4) == 0;
	} else if (strcmp(key, "result") == 0 && !json_literal(v, end, "null")) {
		r->has_result = 1;
		return json_for_each_member(v, end, r, result_member);
	}
	return 0;
}

/* fastexec_parse_reply reads one reply of the daemon. It returns -1 when
 * the message is not valid. */
int fastexec_parse_reply(const char *msg, size_t len, int *has_error, char **error, char **code, int *has_result,
			 int *exit_code, char **result_error)
{
	struct reply r = {0};
	const char *start = json_skip_ws(msg, msg + len);
	int rc = start < msg + len && *start == '{' ? json_for_each_member(msg, msg + len, &r, reply_member) : -1;
	if (rc == 0)
		rc = json_whole(msg, len);
	if (r.error.failed || r.result_error.failed || r.code.failed)
		rc = -1;
	*has_error = r.has_error;
	*has_result = r.has_result;
	*exit_code = r.exit_code;
	*error = r.error.p ? r.error.p : strdup("");
	*code = r.code.p ? r.code.p : strdup("");
	*result_error = r.result_error.p ? r.result_error.p : strdup("");
	return rc;
}

/* ---- paths, as Go's path/filepath makes them --------------------- */

/* fastexec_clean is filepath.Clean: the shortest lexical equivalent. */
char *fastexec_clean(const char *path)
{
	size_t n = strlen(path);
	if (n == 0)
		return strdup(".");
	char *out = malloc(n + 2);
	if (!out)
		return NULL;
	int rooted = path[0] == '/';
	size_t r = 0, w = 0, dotdot = 0;
	if (rooted) {
		out[w++] = '/';
		r = dotdot = 1;
	}
	while (r < n) {
		if (path[r] == '/') {
			r++;
		} else if (path[r] == '.' && (r + 1 == n || path[r + 1] == '/')) {
			r++;
		} else if (path[r] == '.' && path[r + 1] == '.' && (r + 2 == n || path[r + 2] == '/')) {
			r += 2;
			if (w > dotdot) {
				w--;
				while (w > dotdot && out[w] != '/')
					w--;
			} else if (!rooted) {
				if (w > 0)
					out[w++] = '/';
				out[w++] = '.';
				out[w++] = '.';
				dotdot = w;
			}
		} else {
			if ((rooted && w != 1) || (!rooted && w != 0))
				out[w++] = '/';
			for (; r < n && path[r] != '/'; r++)
				out[w++] = path[r];
		}
	}
	if (w == 0)
		out[w++] = '.';
	out[w] = 0;
	return out;
}

/* go_getwd is os.Getwd: $PWD when it names the working folder. */
static char *go_getwd(void)
{
	const char *pwd = getenv("PWD");
	struct stat a, b;
	if (pwd && pwd[0] == '/' && stat(pwd, &a) == 0 && stat(".", &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino)
		return strdup(pwd);
	return getcwd(NULL, 0);
}

/* fastexec_abs is filepath.Abs. */
char *fastexec_abs(const char *path)
{
	if (path[0] == '/')
		return fastexec_clean(path);
	char *wd = go_getwd();
	if (!wd)
		return NULL;
	size_t n = strlen(wd) + strlen(path) + 2;
	char *joined = malloc(n);
	char *out = NULL;
	if (joined) {
		snprintf(joined, n, "%s/%s", wd, path);
		out = fastexec_clean(joined);
	}
	free(joined);
	free(wd);
	return out;
}

/* fastexec_dir is filepath.Dir. */
char *fastexec_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup(".");
	char *head = strndup(path, (size_t)(slash - path + 1));
	if (!head)
		return NULL;
	char *out = fastexec_clean(head);
	free(head);
	return out;
}

/* ---- the command line ----------------------------------------------- */

struct request {
	int do_run; /* warden do, not exec */
	const char *policy, *workspace, *skill_dir, *data_dir;
	int npolicy;
	const char *root, *session, *cwd;
	int64_t timeout;
	char **env;
	int nenv;
	char **argv;
	int argc;
};

/* parse_args fills r from argv, or returns -1 to leave the command line
 * to the Go CLI. */
static int parse_args(int argc, char **argv, struct request *r)
{
	char name[32];
	const char *value;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (cli_flag(argv[i], name, sizeof name, &value) || strcmp(name, "root") != 0)
			return -1;
		if (!value) {
			if (++i >= argc)
				return -1;
			value = argv[i];
		}
		r->root = value;
	}
	if (i >= argc || (strcmp(argv[i], "exec") != 0 && strcmp(argv[i], "do") != 0))
		return -1;
	r->do_run = strcmp(argv[i], "do") == 0;
	r->env = calloc((size_t)argc, sizeof *r->env);
	if (!r->env)
		return -1;
	for (i++; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == 0)
			break;
		if (cli_flag(a, name, sizeof name, &value))
			return -1;
		int known = !strcmp(name, "timeout") || !strcmp(name, "env") || !strcmp(name, "e") || !strcmp(name, "cwd");
		if (r->do_run)
			known = known || !strcmp(name, "policy") || !strcmp(name, "p") || !strcmp(name, "workspace") ||
				!strcmp(name, "w") || !strcmp(name, "skill-dir") || !strcmp(name, "data-dir");
		else
			known = known || !strcmp(name, "session") || !strcmp(name, "s");
		if (!known)
			return -1; /* --tty, --policy, --result, --help, a typo: the Go CLI's */
		if (!value) {
			if (++i >= argc)
				return -1;
			value = argv[i];
		}
		if (!strcmp(name, "policy") || !strcmp(name, "p")) {
			r->policy = value;
			r->npolicy++;
		} else if (!strcmp(name, "workspace") || !strcmp(name, "w")) {
			r->workspace = value;
		} else if (!strcmp(name, "skill-dir")) {
			r->skill_dir = value;
		} else if (!strcmp(name, "data-dir")) {
			r->data_dir = value;
		} else if (!strcmp(name, "session") || !strcmp(name, "s")) {
			r->session = value;
		} else if (!strcmp(name, "cwd")) {
			r->cwd = value;
		} else if (!strcmp(name, "timeout")) {
			/* below 1ms (policies.MinTimeout) the Go CLI refuses it */
			if (fastexec_parse_duration(value, &r->timeout) || r->timeout < 1000000)
				return -1;
		} else {
			r->env[r->nenv++] = (char *)value; /* as written: commas, spaces */
		}
	}
	const char *engine = getenv("WARDEN_ENGINE"); /* it would strengthen a do's policy */
	if (r->do_run ? r->npolicy != 1 || (engine && *engine) : !r->session || !*r->session)
		return -1;
	if (i >= argc)
		return -1;
	r->argv = argv + i;
	r->argc = argc - i;
	return 0;
}

/* ---- talking to the daemon ------------------------------------------ */

static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	if (write(signal_pipe[1], &b, 1) < 0) {
		/* full pipe: the signal is already pending there */
	}
	errno = saved;
}

static void fail(const char *what, const char *detail)
{
	dprintf(2, "warden: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	_exit(EXIT_WARDEN);
}

/* check_utf8 refuses text JSON cannot carry unchanged: Go's decoder would
 * put U+FFFD in its place, which can name another file. The words are
 * runtime.CheckExec's. */
static void check_utf8(const struct request *r)
{
	for (int i = 0; i < r->argc; i++)
		if (!fastexec_valid_utf8(r->argv[i])) {
			dprintf(2, "warden: argument %d is not valid UTF-8; warden passes arguments as UTF-8 text; rename the file or convert the text (iconv -t UTF-8)\n", i + 1);
			_exit(EXIT_WARDEN);
		}
	for (int i = 0; i < r->nenv; i++)
		if (!fastexec_valid_utf8(r->env[i])) {
			dprintf(2, "warden: --env is not valid UTF-8; warden passes flag values as UTF-8 text; convert it (iconv -t UTF-8)\n");
			_exit(EXIT_WARDEN);
		}
	if (r->cwd && !fastexec_valid_utf8(r->cwd)) {
		dprintf(2, "warden: --cwd is not valid UTF-8; warden passes flag values as UTF-8 text; convert it (iconv -t UTF-8)\n");
		_exit(EXIT_WARDEN);
	}
}

/* plain_root accepts an absolute root written plainly; "/" and any other
 * spelling ("//", "/x/../", a trailing slash) go to the Go CLI, which
 * cleans the path and refuses "/". */
static int plain_root(const char *root)
{
	size_t n = strlen(root);
	if (n < 2 || root[0] != '/' || root[n - 1] == '/' || root[n - 1] == ' ')
		return 0;
	return !strstr(root, "//") && !strstr(root, "/./") && !strstr(root, "/../") &&
	       strcmp(root + n - 2, "/.") != 0 && (n < 3 || strcmp(root + n - 3, "/..") != 0);
}

/* read_policy is policies.ReadFile's text of a regular file of at most
 * 1 MiB, as UTF-8 without NUL bytes; NULL for anything else (the Go CLI
 * says what is wrong). */
static char *read_policy(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	char *text = NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= MAX_POLICY_FILE) {
		text = malloc((size_t)st.st_size + 1);
		ssize_t n = text ? read(fd, text, (size_t)st.st_size + 1) : -1;
		if (n != st.st_size) {
			free(text);
			text = NULL;
		} else {
			text[n] = 0;
			if (strlen(text) != (size_t)n || !fastexec_valid_utf8(text)) {
				free(text);
				text = NULL;
			}
		}
	}
	close(fd);
	return text;
}

/* folder makes a folder flag's value absolute, as the Go CLI does, and
 * checks it is an existing folder named in UTF-8; NULL otherwise. */
static char *folder(const char *value)
{
	char *abs = fastexec_abs(value);
	struct stat st;
	if (abs && (!fastexec_valid_utf8(abs) || stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))) {
		free(abs);
		return NULL;
	}
	return abs;
}

/* put_do writes the id and create part of a do request: the policy file's
 * text and the folders the Go CLI would give (loadSandboxPolicy). It
 * returns -1 to leave the command to the Go CLI. */
static int put_do(struct buf *req, const struct request *r)
{
	unsigned char rnd[6];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return -1;
	char id[16];
	snprintf(id, sizeof id, "do-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	char *text = read_policy(r->policy);
	char *policy_dir = fastexec_dir(r->policy);
	char *skill = r->skill_dir && *r->skill_dir ? folder(r->skill_dir) : policy_dir ? folder(policy_dir) : NULL;
	char *work = r->workspace && *r->workspace ? folder(r->workspace) : strdup("");
	char *data = r->data_dir && *r->data_dir ? folder(r->data_dir) : strdup("");
	const char *home = getenv("HOME");
	int rc = -1;
	if (text && skill && work && data && (!home || fastexec_valid_utf8(home))) {
		buf_puts(req, ",\"op\":\"do\",\"id\":");
		json_put_string(req, id);
		buf_puts(req, ",\"create\":{\"policyToml\":");
		json_put_string(req, text);
		buf_puts(req, ",\"vars\":{\"SkillDir\":");
		json_put_string(req, skill);
		buf_puts(req, ",\"WorkDir\":");
		json_put_string(req, work);
		buf_puts(req, ",\"DataDir\":");
		json_put_string(req, data);
		buf_puts(req, ",\"Home\":");
		json_put_string(req, home ? home : "");
		buf_puts(req, "}}");
		rc = 0;
	}
	free(text);
	free(policy_dir);
	free(skill);
	free(work);
	free(data);
	return rc;
}

/* not_run reports whether a do's error reply says that nothing ran, so
 * the Go CLI is to run the command cold: no pool serves it, the daemon is
 * older than the op or the version, or had no connection for it. */
static int not_run(const char *code, const char *error)
{
	return !strcmp(code, "not_pooled") || !strcmp(code, "unsupported_version") ||
	       !strcmp(code, "daemon_unavailable") ||
	       (!strcmp(code, "invalid_input") && strstr(error, "unknown operation \"do\""));
}

/* fall_back undoes what the fast path set up for a do the daemon did not
 * run, so the Go CLI starts as if it had never been tried; a signal that
 * came meanwhile ends warden as it would have before the request. */
static void fall_back(int sock, int signal)
{
	if (signal) {
		const char *name = sigabbrev_np(signal);
		dprintf(2, "warden: stopped by SIG%s before the warden daemon took the request\n", name ? name : "?");
		_exit(128 + signal);
	}
	struct sigaction sa = {.sa_handler = SIG_DFL};
	sigemptyset(&sa.sa_mask);
	int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++)
		sigaction(forwarded[k], &sa, NULL);
	close(signal_pipe[0]);
	close(signal_pipe[1]);
	signal_pipe[0] = signal_pipe[1] = -1;
	close(sock);
}

static void run(struct request *r, char **envp)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			return; /* a closed stdio descriptor: the Go CLI reports it */
	check_utf8(r);

	struct buf req = {0};
	buf_puts(&req, "{\"v\":");
	json_put_int(&req, FASTEXEC_PROTOCOL_VERSION);
	if (r->do_run) {
		if (put_do(&req, r) < 0) {
			free(req.p);
			return;
		}
	} else {
		buf_puts(&req, ",\"op\":\"exec\",\"id\":");
		json_put_string(&req, r->session);
	}
	buf_puts(&req, ",\"exec\":{\"argv\":");
	json_put_strings(&req, r->argv, r->argc);
	if (r->nenv) {
		buf_puts(&req, ",\"env\":");
		json_put_strings(&req, r->env, r->nenv);
	}
	/* the caller's variables that are not UTF-8 are left out, as the Go
	 * client does: only the policy's env.allow names pass anyway */
	int n = 0;
	for (int k = 0; envp && envp[k]; k++) {
		if (!fastexec_valid_utf8(envp[k]))
			continue;
		buf_puts(&req, n++ ? "," : ",\"callerEnv\":[");
		json_put_string(&req, envp[k]);
	}
	if (n)
		buf_puts(&req, "]");
	if (r->cwd && *r->cwd) {
		buf_puts(&req, ",\"cwd\":");
		json_put_string(&req, r->cwd);
	}
	if (r->timeout) {
		buf_puts(&req, ",\"timeout\":");
		json_put_int(&req, r->timeout);
	}
	buf_puts(&req, "}}");
	if (req.failed || req.len > MAX_MESSAGE)
		return;

	const char *root = r->root;
	if (!root) {
		root = getenv("WARDEN_ROOT"); /* an empty one: the Go CLI refuses it */
		if (!root)
			root = FASTEXEC_DEFAULT_ROOT;
	}
	if (!plain_root(root))
		return;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if ((size_t)snprintf(addr.sun_path, sizeof addr.sun_path, "%s/warden.sock", root) >= sizeof addr.sun_path)
		return;
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return;
	if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
		close(sock); /* no daemon yet: the Go CLI starts one */
		return;
	}
	int size = 2 * MAX_MESSAGE;
	if (setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
		setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);

	/* From here on the fast path owns the command: no going back. */
	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		fail("fast exec", strerror(errno));
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++)
		sigaction(forwarded[k], &sa, NULL);

	int stdio[3] = {0, 1, 2};
	if (wire_send(sock, req.p, req.len, stdio, 3) < 0) {
		if (r->do_run && (errno == EPIPE || errno == ECONNRESET)) {
			free(req.p);
			fall_back(sock, 0);
			return; /* no daemon read it */
		}
		fail("warden daemon", strerror(errno));
	}
	free(req.p);

	char *msg = malloc(MAX_MESSAGE + 1);
	if (!msg)
		fail("fast exec", "out of memory");
	int sent_signal = 0;
	for (;;) {
		struct pollfd pfd[2] = {{.fd = sock, .events = POLLIN}, {.fd = signal_pipe[0], .events = POLLIN}};
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail("fast exec", strerror(errno));
		}
		if (pfd[1].revents & POLLIN) {
			unsigned char sigs[16];
			ssize_t k = read(signal_pipe[0], sigs, sizeof sigs);
			for (ssize_t j = 0; j < k; j++) {
				/* The daemon has not read the request: it would not
				 * pass this one on either, so stop waiting, as the Go
				 * client does. Once a signal was sent, what is unread
				 * may be that signal (a double Ctrl-C): later ones
				 * follow it. */
				int unread = 0;
				if (!sent_signal && ioctl(sock, SIOCOUTQ, &unread) == 0 && unread > 0) {
					const char *name = sigabbrev_np(sigs[j]);
					dprintf(2, "warden: stopped by SIG%s before the warden daemon took the request\n",
						name ? name : "?");
					_exit(128 + sigs[j]);
				}
				char ctl[32];
				int len = snprintf(ctl, sizeof ctl, "{\"signal\":%d}", sigs[j]);
				wire_send(sock, ctl, (size_t)len, NULL, 0);
				if (!sent_signal)
					sent_signal = sigs[j];
			}
		}
		if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t len = wire_receive(sock, msg, MAX_MESSAGE + 1, NULL, NULL);
		if (len == -2)
			fail("warden daemon", "message too large");
		if (len < 0 && r->do_run && errno == ECONNRESET && !sent_signal) {
			free(msg);
			fall_back(sock, 0);
			return; /* no daemon read it */
		}
		if (len < 0)
			fail("warden daemon", strerror(errno));
		if (len == 0)
			fail("warden daemon", "EOF");
		int has_error, has_result, code;
		char *error, *error_code, *result_error;
		if (fastexec_parse_reply(msg, (size_t)len, &has_error, &error, &error_code, &has_result, &code, &result_error))
			fail("warden daemon", "malformed reply");
		if (has_error && r->do_run && not_run(error_code, error)) {
			free(error);
			free(error_code);
			free(result_error);
			free(msg);
			fall_back(sock, sent_signal);
			return;
		}
		free(error_code);
		if (has_error && *error) {
			dprintf(2, "warden: %s\n", error);
			_exit(EXIT_WARDEN);
		}
		if (has_result) {
			if (*result_error)
				dprintf(2, "warden: %s\n", result_error);
			_exit(code);
		}
		free(error);
		free(result_error);
	}
}

__attribute__((constructor)) static void fastexec(int argc, char **argv, char **envp)
{
	if (argc < 3 || !argv || !argv[1])
		return;
	const char *off = getenv("WARDEN_FASTPATH");
	if (off && strcmp(off, "off") == 0)
		return;
	struct request r = {0};
	if (parse_args(argc, argv, &r) == 0)
		run(&r, envp);
	free(r.env);
}
