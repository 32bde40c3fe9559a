// The stub of a ruled program ([commands] in a policy; spec/commands.go).
// warden's binary is bound over every place a ruled program has in the
// sandbox, so however the program is started (by name, by path, from a
// shell, make, env or xargs) this constructor runs instead, before Go. It
// sends the agent the call (argv, environment, working folder, the path
// it was started by, and its stdin, stdout and stderr) on the sandbox's
// stub socket, prints the lines the agent relays (an ask waiting, a
// deny), relays the signals it gets, and exits with the program's status.
// The agent asks the host, and runs the real program, which the sandbox
// cannot read, only for a call the rules or a human allow.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "wire.h"

#define STUB_MARKER "/.warden/commands" /* spec.StubMarker */

static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	unsigned char b = (unsigned char)sig;
	int saved = errno;
	if (write(signal_pipe[1], &b, 1) < 0) {
	}
	errno = saved;
}

static void say(const char *a, const char *b)
{
	struct buf line = {0};
	buf_puts(&line, "warden: ");
	buf_puts(&line, a);
	buf_puts(&line, b ? b : "");
	buf_puts(&line, "\n");
	if (!line.failed && write(2, line.p, line.len) < 0) {
	}
	free(line.p);
}

struct stub_event {
	long long code, signal;
	int exited, waiting;
	struct buf error;
};

static int event_member(void *ctx, const char *key, const char *v, const char *end)
{
	struct stub_event *e = ctx;
	if (!strcmp(key, "error")) {
		e->error.len = 0;
		return json_read_string(v, end, &e->error) ? 0 : -1;
	}
	if (!strcmp(key, "exited") || !strcmp(key, "waiting")) {
		int *dst = key[0] == 'e' ? &e->exited : &e->waiting;
		*dst = json_literal(v, end, "true");
		return 0;
	}
	if (!strcmp(key, "code") || !strcmp(key, "signal")) {
		long long *dst = key[0] == 'c' ? &e->code : &e->signal;
		const char *after = json_skip_value(v, end, 1);
		if (!after)
			return -1;
		char num[24];
		size_t n = (size_t)(after - v) < sizeof num - 1 ? (size_t)(after - v) : sizeof num - 1;
		memcpy(num, v, n);
		num[n] = 0;
		*dst = strtoll(num, NULL, 10);
	}
	return 0;
}

static void run_stub(int argc, char **argv, char **envp)
{
	const char *started = (const char *)getauxval(AT_EXECFN);
	char path[PATH_MAX + 1], cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd))
		strcpy(cwd, "/");
	if (!started || !*started)
		started = argv[0];
	if (started[0] == '/')
		snprintf(path, sizeof path, "%s", started);
	else
		snprintf(path, sizeof path, "%s/%s", cwd, started);
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0 && open("/dev/null", O_RDWR) != i)
			_exit(EXIT_WARDEN);

	struct buf req = {0};
	buf_puts(&req, "{\"argv\":");
	json_put_strings(&req, argv, argc);
	int nenv = 0;
	while (envp && envp[nenv])
		nenv++;
	buf_puts(&req, ",\"env\":");
	json_put_strings(&req, envp, nenv);
	buf_puts(&req, ",\"cwd\":");
	json_put_string(&req, cwd);
	buf_puts(&req, ",\"path\":");
	json_put_string(&req, path);
	buf_puts(&req, "}");

	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path + 1, STUB_SOCKET, sizeof STUB_SOCKET - 1);
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + sizeof STUB_SOCKET);
	int fds[3] = {0, 1, 2};
	if (sock < 0 || connect(sock, (struct sockaddr *)&a, alen) < 0) {
		say(argv[0], ": a ruled program, and warden's agent does not answer; nothing was run");
		_exit(126);
	}
	if (req.failed || wire_send(sock, req.p, req.len, fds, 3) < 0) {
		say(argv[0], ": could not send the call to warden's agent; nothing was run");
		_exit(126);
	}
	free(req.p);

	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
		static const int relayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
		struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
		sigemptyset(&sa.sa_mask);
		for (size_t i = 0; i < sizeof relayed / sizeof relayed[0]; i++)
			sigaction(relayed[i], &sa, NULL);
	}
	char *msg = malloc(MAX_MESSAGE);
	if (!msg)
		_exit(EXIT_WARDEN);
	for (;;) {
		struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = signal_pipe[0], .events = POLLIN}};
		if (poll(p, signal_pipe[0] >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(EXIT_WARDEN);
		}
		if (p[1].revents & POLLIN) {
			unsigned char sig;
			while (read(signal_pipe[0], &sig, 1) == 1) {
				struct buf c = {0};
				buf_puts(&c, "{\"signal\":");
				json_put_int(&c, sig);
				buf_puts(&c, "}");
				if (!c.failed)
					wire_send(sock, c.p, c.len, NULL, 0);
				free(c.p);
			}
		}
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t n = wire_receive(sock, msg, MAX_MESSAGE, NULL, NULL);
		if (n <= 0) {
			say(argv[0], ": lost warden's agent");
			_exit(EXIT_WARDEN);
		}
		struct stub_event e = {.code = EXIT_WARDEN};
		if (json_for_each_member(msg, msg + n, &e, event_member)) {
			say(argv[0], ": malformed answer from warden's agent");
			_exit(EXIT_WARDEN);
		}
		if (e.error.len)
			say(e.error.p, NULL);
		free(e.error.p);
		if (e.waiting)
			continue;
		if (e.exited && e.signal > 0 && e.signal < 65) {
			/* killed by a signal: so is the stub, as its caller expects */
			signal((int)e.signal, SIG_DFL);
			sigset_t one;
			sigemptyset(&one);
			sigaddset(&one, (int)e.signal);
			sigprocmask(SIG_UNBLOCK, &one, NULL);
			raise((int)e.signal);
		}
		_exit((int)(e.code & 0xff));
	}
}

__attribute__((constructor(101))) static void stub_main(int argc, char **argv, char **envp)
{
	/* The agent is PID 1; elsewhere the marker exists only in a sandbox
	 * with command rules, where warden's binary runs as nothing else. */
	if (argc < 1 || !argv || !argv[0] || getpid() == 1 || access(STUB_MARKER, F_OK) != 0)
		return;
	run_stub(argc, argv, envp);
}
