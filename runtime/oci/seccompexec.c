// The first process of a container warden runs under a policy on its OCI
// face (seccompexec.go): libcontainer's init has set up everything but the
// seccomp filter and executes warden's own binary (through /proc/self/exe,
// the sealed copy it runs from) as
//
//	/proc/self/exe warden-seccomp-exec FD FLAGS ARGV...
//
// This constructor runs first (priority 101, before libcontainer's nsenter
// and Go), makes the process undumpable, reads the program warden compiled
// once for the policy (the program libcontainer would build, from a sealed
// memfd at FD) and closes FD, finds ARGV[0] the way libcontainer does (Go's
// exec.LookPath over the container's PATH, before the filter, as there),
// loads the filter with the flags libcontainer would pass (FLAGS) and
// executes the command with the container's environment. It never executes
// the command without the filter: any failure ends the process. It lives
// in runtime/oci so that every binary that can start such a container has it.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SECCOMP_EXEC_MARKER "warden-seccomp-exec" /* seccompExecMarker */
#define MAX_PROGRAM 4096                           /* BPF_MAXINSNS, maxProgram */

extern char **environ;

static void fail(int code, const char *name, const char *what)
{
	dprintf(2, "warden: exec: \"%s\": %s\n", name, what);
	_exit(code);
}

static struct sock_filter prog[MAX_PROGRAM];
static unsigned short prog_len;

// read_program reads the program at fd and closes fd.
static void read_program(int fd, const char *name)
{
	struct stat st;
	size_t got = 0;

	if (fstat(fd, &st) || st.st_size <= 0 || st.st_size % sizeof(prog[0]) ||
	    (size_t)st.st_size > sizeof(prog))
		fail(255, name, "warden's seccomp program is missing or malformed");
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(fd, (char *)prog + got, (size_t)st.st_size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail(255, name, "cannot read warden's seccomp program");
		got += (size_t)n;
	}
	close(fd);
	prog_len = (unsigned short)(st.st_size / sizeof(prog[0]));
}

// load_filter loads the program for this process as libcontainer does:
// prctl without flags, seccomp(2) with them (no_new_privs is set already).
static void load_filter(unsigned long flags, const char *name)
{
	struct sock_fprog fprog = {.len = prog_len, .filter = prog};
	long err;

	if (flags)
		err = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
	else
		err = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0);
	if (err)
		fail(255, name, "cannot load the seccomp filter");
}

// executable is Go's findExecutable: a file that is not a folder and
// that this process may execute.
static int executable(const char *path)
{
	struct stat st;

	if (stat(path, &st))
		return 0;
	if (S_ISDIR(st.st_mode))
		return 0;
	if (faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0)
		return 1;
	if (errno != ENOSYS && errno != EPERM)
		return 0;
	return (st.st_mode & 0111) != 0;
}

// find is the program libcontainer's init would execute for argv[0]: a
// name with a slash as it is, any other looked up in $PATH (an empty entry
// is the current folder, which, as in Go, a command may not be found in).
static const char *find(const char *name)
{
	static char candidate[PATH_MAX];
	const char *path = NULL;

	if (strchr(name, '/'))
		return name;
	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	while (*name && path && *path) {
		const char *end = strchrnul(path, ':');
		int len = (int)(end - path), n;
		if (len == 0)
			n = snprintf(candidate, sizeof(candidate), "./%s", name);
		else
			n = snprintf(candidate, sizeof(candidate), "%.*s/%s", len, path, name);
		// A path too long to be one is no candidate (never a shortened one).
		if (n > 0 && (size_t)n < sizeof(candidate) && executable(candidate)) {
			if (candidate[0] != '/')
				fail(127, name, "cannot run executable found relative to current directory");
			return candidate;
		}
		path = *end ? end + 1 : end;
	}
	fail(127, name, "executable file not found in $PATH");
	return NULL;
}

__attribute__((constructor(101))) static void seccomp_exec_main(int argc, char **argv)
{
	const char *path;
	char *end;
	long fd;
	unsigned long flags;

	if (argc < 5 || !argv || !argv[1] || strcmp(argv[1], SECCOMP_EXEC_MARKER))
		return;
	// Nothing may read or write this process's memory until the filter
	// holds (execve of the command makes it dumpable again).
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	errno = 0;
	fd = strtol(argv[2], &end, 10);
	if (errno || *end || fd < 3 || fd > INT_MAX)
		fail(255, argv[4], "warden's seccomp program has no descriptor");
	flags = strtoul(argv[3], &end, 10);
	if (errno || *end || (flags & ~(unsigned long)(SECCOMP_FILTER_FLAG_SPEC_ALLOW)))
		fail(255, argv[4], "warden's seccomp flags are not ones it passes");
	read_program((int)fd, argv[4]);
	path = find(argv[4]);
	load_filter(flags, argv[4]);
	execve(path, argv + 4, environ);
	fail(errno == ENOENT ? 127 : 126, argv[4], strerror(errno));
}
