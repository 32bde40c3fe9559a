// The first process of a container warden runs under a policy on its OCI
// face (runtime/oci/seccompexec.go): libcontainer's init has set up
// everything but the seccomp filter and executes warden's own binary
// (through /proc/self/exe, the sealed copy it runs from) as
//
//	/proc/self/exe warden-seccomp-exec FD ARGV...
//
// This constructor loads the filter warden compiled once for the policy
// (a sealed memfd at FD: the program libcontainer would build, without
// libseccomp's milliseconds in every start), closes FD, finds ARGV[0] the
// way libcontainer does (Go's exec.LookPath over the container's PATH) and
// executes it with the container's environment. It never executes the
// command without the filter: any failure ends the process.

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
#include <unistd.h>

#define SECCOMP_EXEC_MARKER "warden-seccomp-exec" /* runtime/oci seccompExecMarker */
#define MAX_PROGRAM 4096                           /* BPF_MAXINSNS */

extern char **environ;

static void fail(int code, const char *name, const char *what)
{
	dprintf(2, "warden: exec: \"%s\": %s\n", name, what);
	_exit(code);
}

// load_filter reads the program at fd and loads it for this process (no
// flags, as libcontainer loads it; no_new_privs is set already).
static void load_filter(int fd, const char *name)
{
	static struct sock_filter prog[MAX_PROGRAM];
	struct sock_fprog fprog;
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
	fprog.len = (unsigned short)(st.st_size / sizeof(prog[0]));
	fprog.filter = prog;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0))
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

// run executes argv the way libcontainer's init does: a name with a slash
// as it is, any other looked up in $PATH (an empty entry is the current
// folder, which, as in Go, a command may not be found in).
static void run(char **argv)
{
	const char *name = argv[0], *path = NULL;
	char candidate[PATH_MAX];

	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	if (strchr(name, '/')) {
		execve(name, argv, environ);
		fail(errno == ENOENT ? 127 : 126, name, strerror(errno));
	}
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
			execve(candidate, argv, environ);
			fail(126, name, strerror(errno));
		}
		path = *end ? end + 1 : end;
	}
	fail(127, name, "executable file not found in $PATH");
}

__attribute__((constructor)) static void seccomp_exec_main(int argc, char **argv)
{
	char *end;
	long fd;

	if (argc < 4 || !argv || !argv[1] || strcmp(argv[1], SECCOMP_EXEC_MARKER))
		return;
	// Nothing may read or write this process's memory until the filter
	// holds (execve of the command makes it dumpable again).
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	errno = 0;
	fd = strtol(argv[2], &end, 10);
	if (errno || *end || fd < 3 || fd > INT_MAX)
		fail(255, argv[3], "warden's seccomp program has no descriptor");
	load_filter((int)fd, argv[3]);
	run(argv + 3);
}
