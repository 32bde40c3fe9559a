// The user-namespace owner: `warden-userns-owner UID GID` (argv[0]), run
// by the daemon as root. It becomes UID/GID, makes a user namespace (which
// the kernel then records as owned by UID, not root), writes one byte to
// stdout and waits until stdin closes. The daemon writes the namespace's
// id maps, starts the sandbox in it and closes stdin.
//
// Why: the kernel charges a user namespace's pending signals, message
// queues, inotify instances and watches, and its own count of namespaces,
// to the namespace's owner at every level up to the host. Owned by root,
// one sandbox could use up host root's allowance; owned by the sandbox's
// own host uid, it uses only that uid's. A Go process cannot do this: the
// kernel refuses unshare(CLONE_NEWUSER) to a multithreaded process, and
// Go's own fork helper unshares before it changes the uid.
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse_id(const char *s, unsigned long *out)
{
	char *end;
	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || !*s || *end || *out == 0 || *out >= 4294967295UL ? -1 : 0;
}

__attribute__((constructor)) static void userns_owner_main(int argc, char **argv)
{
	unsigned long uid, gid;
	char c;
	ssize_t n;

	if (argc != 3 || !argv || !argv[0] || strcmp(argv[0], "warden-userns-owner"))
		return;
	if (parse_id(argv[1], &uid) || parse_id(argv[2], &gid))
		_exit(2);
	if (setgroups(0, NULL) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
		_exit(3);
	if (unshare(CLONE_NEWUSER))
		_exit(4);
	if (write(1, "r", 1) != 1)
		_exit(5);
	do
		n = read(0, &c, 1);
	while (n > 0 || (n < 0 && errno == EINTR));
	_exit(0);
}
