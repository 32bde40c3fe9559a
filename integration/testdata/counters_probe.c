// counters_probe RESOURCE MODE: use a per-user kernel counter.
//   MODE use:  take as much of RESOURCE as the kernel gives (bounded), print
//              "RESOURCE COUNT ERRNO-NAME", then hold it until stdin closes.
//   MODE keep: like use, for mq only: the queues are left (not unlinked)
//              in the IPC namespace and the probe exits.
//   MODE check: take one more (a second session, host root), print
//              "RESOURCE ok" or "RESOURCE failed ERRNO-NAME".
// RESOURCE: sigq (queued real-time signals; check also makes a POSIX
// timer), mq (POSIX message queues of the default size), pipe (pipe buffer
// pages: check wants a full 64 KiB pipe that F_SETPIPE_SZ can grow),
// inotify (instances), iwatch (inotify watches), epoll (epoll watches).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

static const char *errname(int e)
{
	switch (e) {
	case 0: return "none";
	case EAGAIN: return "EAGAIN";
	case EMFILE: return "EMFILE";
	case ENFILE: return "ENFILE";
	case ENOSPC: return "ENOSPC";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case ENOMEM: return "ENOMEM";
	default: return strerror(e);
	}
}

static int one(const char *r)
{
	if (!strcmp(r, "sigq")) {
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, SIGRTMIN);
		sigprocmask(SIG_BLOCK, &s, NULL);
		union sigval v = {0};
		if (sigqueue(getpid(), SIGRTMIN, v))
			return errno;
		timer_t t;
		struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN};
		return timer_create(CLOCK_MONOTONIC, &ev, &t) ? errno : 0;
	}
	if (!strcmp(r, "mq")) {
		char name[64];
		snprintf(name, sizeof name, "/counters-probe-%d", getpid());
		mqd_t q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, NULL);
		if (q == (mqd_t)-1)
			return errno;
		mq_unlink(name);
		return 0;
	}
	if (!strcmp(r, "pipe")) {
		int p[2];
		if (pipe(p))
			return errno;
		if (fcntl(p[0], F_GETPIPE_SZ) != 65536)
			return ENOSPC;
		return fcntl(p[0], F_SETPIPE_SZ, 256 << 10) < 0 ? errno : 0;
	}
	if (!strcmp(r, "inotify"))
		return inotify_init1(0) < 0 ? errno : 0;
	if (!strcmp(r, "iwatch")) {
		int fd = inotify_init1(0);
		if (fd < 0)
			return errno;
		return inotify_add_watch(fd, "/", IN_MODIFY) < 0 ? errno : 0;
	}
	if (!strcmp(r, "epoll")) {
		int ep = epoll_create1(0), p[2];
		if (ep < 0 || pipe(p))
			return errno;
		struct epoll_event e = {.events = EPOLLIN};
		return epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e) ? errno : 0;
	}
	fprintf(stderr, "unknown resource %s\n", r);
	exit(2);
}

// use takes RESOURCE until the kernel says no or a bound is reached.
static int keep;

static long use(const char *r, int *err)
{
	long n = 0;
	*err = 0;
	if (!strcmp(r, "sigq")) {
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, SIGRTMIN);
		sigprocmask(SIG_BLOCK, &s, NULL);
		union sigval v = {0};
		while (n < 200000 && sigqueue(getpid(), SIGRTMIN, v) == 0)
			n++;
	} else if (!strcmp(r, "mq")) {
		for (; n < 1000; n++) {
			char name[64];
			snprintf(name, sizeof name, "/counters-probe-%d-%ld", getpid(), n);
			mqd_t q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, NULL);
			if (q == (mqd_t)-1)
				break;
			if (!keep)
				mq_unlink(name);
		}
	} else if (!strcmp(r, "pipe")) {
		// Empty pipes until a new one comes out small: the user's
		// pipe-user-pages-soft is used up.
		int p[2];
		for (; n < 1100; n++) {
			if (pipe(p))
				break;
			if (fcntl(p[0], F_GETPIPE_SZ) < 65536) {
				errno = ENOSPC;
				break;
			}
		}
	} else if (!strcmp(r, "inotify")) {
		while (n < 100000 && inotify_init1(0) >= 0)
			n++;
	} else if (!strcmp(r, "iwatch")) {
		// Many instances watching the same files: fewer files to make.
		char dir[] = "/tmp/iwatchXXXXXX", path[64];
		int files = 2000;
		if (!mkdtemp(dir))
			return *err = errno, 0;
		for (int i = 0; i < files; i++) {
			snprintf(path, sizeof path, "%s/%d", dir, i);
			int f = open(path, O_CREAT | O_WRONLY, 0600);
			if (f < 0)
				return *err = errno, n;
			close(f);
		}
		for (;;) {
			int fd = inotify_init1(0);
			if (fd < 0)
				goto out;
			for (int i = 0; i < files; i++) {
				snprintf(path, sizeof path, "%s/%d", dir, i);
				if (inotify_add_watch(fd, path, IN_MODIFY) < 0)
					goto out;
				n++;
			}
		}
	} else if (!strcmp(r, "epoll")) {
		// Every pipe in every epoll instance: instances x pipes watches.
		int eps[100], p[1900];
		for (int i = 0; i < 100; i++)
			if ((eps[i] = epoll_create1(0)) < 0)
				goto out;
		for (int j = 0; j < 1900; j++) {
			int pp[2];
			if (pipe(pp))
				goto out;
			p[j] = pp[0];
		}
		for (int i = 0; i < 100; i++)
			for (int j = 0; j < 1900; j++) {
				struct epoll_event e = {.events = EPOLLIN};
				if (epoll_ctl(eps[i], EPOLL_CTL_ADD, p[j], &e))
					goto out;
				n++;
			}
	} else {
		fprintf(stderr, "unknown resource %s\n", r);
		exit(2);
	}
out:
	*err = errno;
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: counters_probe RESOURCE use|check\n");
		return 2;
	}
	if (!strcmp(argv[2], "check")) {
		int e = one(argv[1]);
		if (e)
			printf("%s failed %s\n", argv[1], errname(e));
		else
			printf("%s ok\n", argv[1]);
		return 0;
	}
	int err;
	keep = !strcmp(argv[2], "keep");
	long n = use(argv[1], &err);
	printf("%s %ld %s\n", argv[1], n, errname(err));
	fflush(stdout);
	if (keep)
		return 0;
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
