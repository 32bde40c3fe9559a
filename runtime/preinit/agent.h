// The sandbox agent's parts, named here so that landlock.c and the Go
// tests (through agent.go) can reach them.
#ifndef WARDEN_AGENT_H
#define WARDEN_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

struct strings {
	char **v;
	int n, cap;
	int failed;
};

void strings_add(struct strings *s, const char *v);
void strings_free(struct strings *s);

struct agent_config {
	int allow_all;           /* no exec.allow: everything visible may run */
	struct strings allow;    /* --exec-allow */
	struct strings writable; /* --writable */
	struct strings exec_dirs; /* --exec-dirs: writable folders whose programs may run */
	struct strings hidden;   /* --hidden-programs, the file's lines */
	int pooled;
};

/* runtime.execRequest */
struct request {
	struct strings argv, env;
	char *cwd;
	int tty, seal;
	unsigned rows, cols;
	int nul; /* a string held a NUL byte, which no C string can carry */
};

int agent_parse_request(const char *msg, size_t len, struct request *r);
void agent_free_request(struct request *r);

/* runtime.execControl */
struct control {
	long long signal;
	int kill;
};

int agent_parse_control(const char *msg, size_t len, struct control *c);

/* runtime.execEvent */
struct event {
	int started, exited;
	long pid;
	int code, signal;
	struct buf error;
};

void agent_event_json(const struct event *ev, struct buf *out);

/* agent_lookup resolves name as the Go agent did; it returns the path
 * (to free) or NULL with ev filled in. */
char *agent_lookup(const struct agent_config *cfg, const char *name, const char *cwd, char *const *env, int nenv,
		   struct event *ev);
void agent_exec_error(const char *name, const char *path, int err, struct event *ev);

/* ---- what a command leaves behind (leftover.c) ---------------------- */

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
 * in a running command's session. Cheap when the agent has no child left. */
void leftover_kill(const struct stdio_files *files, int (*running)(pid_t));

/* ---- Landlock (landlock.c) ------------------------------------------ */

#define LL_EXECUTE (1ULL << 0)
#define LL_WRITE_FILE (1ULL << 1)
#define LL_READ_FILE (1ULL << 2)
#define LL_READ_DIR (1ULL << 3)
#define LL_REMOVE_DIR (1ULL << 4)
#define LL_REMOVE_FILE (1ULL << 5)
#define LL_MAKE_CHAR (1ULL << 6)
#define LL_MAKE_DIR (1ULL << 7)
#define LL_MAKE_REG (1ULL << 8)
#define LL_MAKE_SOCK (1ULL << 9)
#define LL_MAKE_FIFO (1ULL << 10)
#define LL_MAKE_BLOCK (1ULL << 11)
#define LL_MAKE_SYM (1ULL << 12)
#define LL_REFER (1ULL << 13)
#define LL_TRUNCATE (1ULL << 14)
#define LL_IOCTL_DEV (1ULL << 15)

struct rule {
	char *path;
	uint64_t access;
};

struct rules {
	struct rule *v;
	int n, cap;
	int failed;
};

void rules_add(struct rules *r, const char *path, uint64_t access);
void rules_free(struct rules *r);

/* landlock_rules is what the agent asks of Landlock for cfg: the base
 * rules, known from its start, then the session rules, for the folders a
 * claim binds into the running sandbox. */
void landlock_rules(const struct agent_config *cfg, struct rules *out);
void landlock_base_rules(const struct agent_config *cfg, struct rules *out);
void landlock_session_rules(const struct agent_config *cfg, struct rules *out);
/* landlock_readable_except: reading everything but the hidden files. */
void landlock_readable_except(char *const *hidden, int n, struct rules *out);
/* landlock_split_fingerprint changes when a folder whose entries get
 * rules of their own (one above a hidden file) gains, loses or replaces
 * an entry: rules attach to the inodes there when they are made. */
uint64_t landlock_split_fingerprint(char *const *hidden, int n);
/* landlock_executables adds each ELF program's interpreter. */
void landlock_executables(char *const *exes, int n, struct strings *out);
/* elf_interp reads a program's PT_INTERP; 0 when it has one. */
int elf_interp(const char *path, struct buf *out);
/* landlock_handled is what an ABI version handles of the file system
 * rights go-landlock's V7 knows. */
uint64_t landlock_handled(int abi);
/* A ruleset being filled: landlock_begin makes it (fd -1 when the kernel
 * cannot enforce it and best effort restricts nothing; refer says rules
 * will need "refer"), landlock_add adds rules downgraded to what the
 * kernel knows, landlock_enforce restricts the agent and every command it
 * will start. Each returns -1 with err saying why it failed. */
struct landlock {
	int fd;
	uint64_t handled;
};
int landlock_begin(struct landlock *l, int refer, struct buf *err);
int landlock_add(struct landlock *l, const struct rules *rules, struct buf *err);
int landlock_enforce(struct landlock *l, struct buf *err);

#endif
