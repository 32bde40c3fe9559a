// leftover.c: what a command leaves behind once it ended, and killing it.
#ifndef WARDEN_LEFTOVER_H
#define WARDEN_LEFTOVER_H

#include <sys/types.h>

/* The files a command's stdin, stdout and stderr are, by device and inode:
 * the agent closes its own copies once the command started. */
struct stdio_files {
	struct {
		dev_t dev;
		ino_t ino;
	} v[3];
	int n;
};

/* stdio_files_of fills out with the caller's descriptors, or with the
 * terminal of master when it is not negative. Files such as /dev/null,
 * which give nothing away, are left out. */
void stdio_files_of(const int *fds, int nfds, int master, struct stdio_files *out);
/* leftover_kill SIGKILLs every process in the sandbox, but the agent and
 * the pids for which running is true, that still holds one of files after
 * a short grace (GRACE_MS): it runs once a command ended. A process whose
 * descriptors the agent cannot read counts as holding them, unless it is
 * in a running command's session. Cheap when the agent has no child left
 * but spare (its process kept ready; 0 for none). */
void leftover_kill(const struct stdio_files *files, int (*running)(pid_t), pid_t spare);

#endif
