// What a command leaves behind in the sandbox. A process that outlives
// its command (forked, then setsid, then orphaned) and still holds the
// caller's stdin, stdout or stderr would read what the caller's user types
// next and keep the caller's pipes open after the command ended, past any
// timeout. When a command ends the agent kills every such process; one
// whose stdio was redirected (a background server) lives on.

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "leftover.h"

/* A process that forked before it was killed (one with a fatal signal
 * pending forks no more) is caught by a later pass; a killed one may
 * still hold the files for a moment as it dies. */
#define PASSES 64
/* How long a holder has to let go: `server >log 2>&1 </dev/null &` holds
 * the caller's stdio from its fork until its redirections, and its shell
 * may end first. */
#define GRACE_MS 100

static void add_file(struct stdio_files *out, const struct stat *st)
{
	for (int i = 0; i < out->n; i++)
		if (out->v[i].dev == st->st_dev && out->v[i].ino == st->st_ino)
			return;
	out->v[out->n].dev = st->st_dev;
	out->v[out->n].ino = st->st_ino;
	out->n++;
}

void stdio_files_of(const int *fds, int nfds, int master, struct stdio_files *out)
{
	struct stat st;
	out->n = 0;
	if (master >= 0) {
		/* the command's terminal is the slave side of master */
		char path[64];
		unsigned n;
		if (ioctl(master, TIOCGPTN, &n) == 0 && snprintf(path, sizeof path, "/dev/pts/%u", n) > 0 &&
		    stat(path, &st) == 0)
			add_file(out, &st);
		return;
	}
	for (int i = 0; i < nfds && i < 3; i++) {
		if (fstat(fds[i], &st) < 0)
			continue;
		/* /dev/null and its kin give nothing away, and a background
		 * server's </dev/null is the very same file; a terminal does */
		if (S_ISCHR(st.st_mode) && !isatty(fds[i]))
			continue;
		add_file(out, &st);
	}
}

static int pid_name(const char *name, pid_t *pid)
{
	char *end;
	long v = strtol(name, &end, 10);
	if (name[0] < '1' || name[0] > '9' || *end || v <= 0 || v > 0x7fffffff)
		return -1;
	*pid = (pid_t)v;
	return 0;
}

/* alone: PID 1 has no child left, so no process but the agent exists in
 * the sandbox (every other one descends from one of its children). */
static int alone(pid_t spare)
{
	char b[32];
	int fd = open("/proc/1/task/1/children", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n == 0)
		return 1;
	/* spare alone ("PID "): the agent's own process kept ready, which
	 * starts nothing */
	char want[16];
	int len = spare > 0 ? snprintf(want, sizeof want, "%d ", (int)spare) : 0;
	return len > 0 && n == len && memcmp(b, want, (size_t)len) == 0;
}

/* session_of is a process's session id (from /proc/PID/stat, which every
 * process can read), or -1. */
static pid_t session_of(int proc, pid_t pid)
{
	char path[32], b[512];
	snprintf(path, sizeof path, "%d/stat", (int)pid);
	int fd = openat(proc, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return -1;
	b[n] = 0;
	/* pid (comm) state ppid pgrp session: comm may hold anything */
	char *p = strrchr(b, ')');
	int ppid, pgrp, sid;
	if (!p || sscanf(p + 1, " %*c %d %d %d", &ppid, &pgrp, &sid) != 3)
		return -1;
	return sid;
}

/* holds_in tells whether the descriptor table listed in dir holds one of
 * files: 1 yes, 0 no, -1 it cannot be read (the process made itself
 * non-dumpable, which hides its descriptors from a process of the same
 * user without CAP_SYS_PTRACE). */
static int holds_in(int dir, const struct stdio_files *files)
{
	DIR *d = fdopendir(dir);
	if (!d) {
		close(dir);
		return -1;
	}
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, 0) < 0) {
			if (errno == EACCES || errno == EPERM)
				found = -1;
			continue; /* closed meanwhile */
		}
		for (int i = 0; i < files->n; i++)
			if (files->v[i].dev == st.st_dev && files->v[i].ino == st.st_ino)
				found = 1;
	}
	closedir(d);
	return found;
}

/* holds looks at every thread's table: a thread made by clone without
 * CLONE_FILES has one of its own. Same answers as holds_in; 0 also for a
 * process gone meanwhile. */
static int holds(int proc, pid_t pid, const struct stdio_files *files)
{
	char path[32];
	snprintf(path, sizeof path, "%d/task", (int)pid);
	int tasks = openat(proc, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tasks < 0)
		return 0;
	DIR *d = fdopendir(tasks);
	if (!d) {
		close(tasks);
		return -1;
	}
	int found = 0;
	struct dirent *e;
	while (found != 1 && (e = readdir(d))) {
		pid_t tid;
		if (pid_name(e->d_name, &tid))
			continue;
		snprintf(path, sizeof path, "%d/fd", (int)tid);
		int fd = openat(dirfd(d), path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0) {
			if (errno == EACCES || errno == EPERM)
				found = -1;
			continue;
		}
		int r = holds_in(fd, files);
		if (r)
			found = r;
	}
	closedir(d);
	return found;
}

/* kill_pass finds, once, every process but PID 1 and the running
 * commands' own that holds one of files, or whose descriptors cannot be
 * read while it belongs to no running command's session. It returns how
 * many it found, killing them when told to. */
static int kill_pass(const struct stdio_files *files, int (*running)(pid_t), int kill_them)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int proc = dirfd(d), found = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		pid_t pid;
		if (pid_name(e->d_name, &pid) || pid == 1 || running(pid))
			continue;
		int r = holds(proc, pid, files);
		if (r == 0)
			continue;
		if (r < 0) {
			/* Hidden: a command that still runs answers for its
			 * own processes when it ends; anything else is killed as
			 * if it held them, or hiding would be the way out. */
			pid_t sid = session_of(proc, pid);
			if (sid > 0 && running(sid))
				continue;
		}
		if (kill_them)
			kill(pid, SIGKILL);
		found++;
	}
	closedir(d);
	return found;
}

static void nap(int ms)
{
	struct timespec t = {.tv_nsec = ms * 1000000L};
	nanosleep(&t, NULL);
}

void leftover_kill(const struct stdio_files *files, int (*running)(pid_t), pid_t spare)
{
	if (files->n == 0 || alone(spare))
		return;
	for (int waited = 0, step = 1; kill_pass(files, running, 0) > 0; waited += step, step *= 2) {
		if (waited >= GRACE_MS) {
			for (int i = 0; i < PASSES && kill_pass(files, running, 1) > 0; i++)
				nap(1);
			return;
		}
		if (step > 20)
			step = 20;
		nap(step);
	}
}
