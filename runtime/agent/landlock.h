// landlock.c: the Landlock rules of a sandbox's commands, and enforcing
// them on the agent.
#ifndef WARDEN_LANDLOCK_H
#define WARDEN_LANDLOCK_H

#include <stdint.h>

#include "agent.h"
#include "wire.h"

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
/* landlock_split_dirs lists the folders whose entries get rules of their
 * own (those above a hidden file), sorted. landlock_fingerprint of that
 * list changes when one of them gains, loses or replaces an entry: rules
 * attach to the inodes there when they are made. */
void landlock_split_dirs(char *const *hidden, int n, struct strings *split);
uint64_t landlock_fingerprint(const struct strings *split);
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
 * will start. Each returns -1 with err saying why it failed. Once enforced
 * the ruleset's descriptor is spent: closing it frees its rules, a
 * thousand and more where exec.allow hides the system's other programs
 * (~0.4 ms), so the caller closes it when that costs no command time. */
struct landlock {
	int fd;
	int spent; /* the enforced ruleset, still open, or -1 */
	uint64_t handled;
};
int landlock_begin(struct landlock *l, int refer, struct buf *err);
int landlock_add(struct landlock *l, const struct rules *rules, struct buf *err);
int landlock_enforce(struct landlock *l, struct buf *err);

#endif
