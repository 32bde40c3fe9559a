// Landlock, the agent's second wall: executables outside exec.allow cannot
// be executed even where a mount shows them, the programs the host listed
// (runtime/programs.go) cannot even be read (so the dynamic loader cannot
// map them either), and nothing outside the writable places can be
// written. Applied as go-landlock's V7.BestEffort().RestrictPaths would:
// rights the kernel does not know are dropped, and a kernel without
// Landlock (or without "refer" when a rule needs it) restricts nothing.

#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "landlock.h"

#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define LANDLOCK_RULE_PATH_BENEATH 1

struct ruleset_attr {
	uint64_t handled_access_fs;
};

struct path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

static const uint64_t read_rights = LL_READ_FILE | LL_READ_DIR;
static const uint64_t write_rights = LL_WRITE_FILE | LL_REMOVE_DIR | LL_REMOVE_FILE | LL_MAKE_DIR | LL_MAKE_REG |
				     LL_MAKE_SOCK | LL_MAKE_FIFO | LL_MAKE_SYM | LL_TRUNCATE | LL_REFER;

void rules_add(struct rules *r, const char *path, uint64_t access)
{
	if (r->failed)
		return;
	if (r->n == r->cap) {
		int cap = r->cap ? r->cap * 2 : 16;
		struct rule *v = realloc(r->v, (size_t)cap * sizeof *v);
		if (!v) {
			r->failed = 1;
			return;
		}
		r->v = v;
		r->cap = cap;
	}
	if (!(r->v[r->n].path = strdup(path))) {
		r->failed = 1;
		return;
	}
	r->v[r->n++].access = access;
}

void rules_free(struct rules *r)
{
	for (int i = 0; i < r->n; i++)
		free(r->v[i].path);
	free(r->v);
	*r = (struct rules){0};
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

void landlock_base_rules(const struct agent_config *cfg, struct rules *out)
{
	if (cfg->allow_all) {
		rules_add(out, "/", read_rights | LL_EXECUTE);
	} else {
		landlock_readable_except(cfg->hidden.v, cfg->hidden.n, out);
		struct strings exes = {0};
		landlock_executables(cfg->allow.v, cfg->allow.n, &exes);
		for (int i = 0; i < exes.n; i++)
			rules_add(out, exes.v[i], LL_READ_FILE | LL_EXECUTE);
		if (exes.failed)
			out->failed = 1;
		strings_free(&exes);
	}
	rules_add(out, "/dev", read_rights | LL_WRITE_FILE | LL_IOCTL_DEV | LL_TRUNCATE);
	/* mq_open reaches the session's queues through the kernel's own mount
	 * of its IPC namespace's mqueue file system, which has no parent for
	 * /dev's rule to apply from; its root is the same inode as that of
	 * /dev/mqueue, so a rule there is what lets POSIX queues open. */
	if (exists("/dev/mqueue"))
		rules_add(out, "/dev/mqueue", read_rights | LL_WRITE_FILE | LL_TRUNCATE);
	/* /proc read-only: its write rights would open /proc/PID/mem, which
	 * writes through read-only text (a shell and a seeking tool patch
	 * each other's code, past exec.allow and noexec alike). A write
	 * through /proc/self/fd/N is checked against the file it names. */
	rules_add(out, "/proc", read_rights);
}

/* The session's folders are the only mounts a claim adds: rules made
 * before it would attach to the empty mountpoints beneath them. Reading
 * them is what the base rules grant every other entry of "/". */
static const char *const session_folders[] = {"/workspace", "/data"};

void landlock_session_rules(const struct agent_config *cfg, struct rules *out)
{
	for (size_t i = 0; i < sizeof session_folders / sizeof session_folders[0]; i++)
		if (exists(session_folders[i]))
			rules_add(out, session_folders[i], read_rights);
	for (int i = 0; i < cfg->writable.n; i++)
		if (exists(cfg->writable.v[i]))
			rules_add(out, cfg->writable.v[i], read_rights | write_rights);
	/* exec.workspace: what the sandbox writes there may run. */
	for (int i = 0; i < cfg->exec_dirs.n; i++)
		if (exists(cfg->exec_dirs.v[i]))
			rules_add(out, cfg->exec_dirs.v[i], read_rights | LL_EXECUTE);
}

void landlock_rules(const struct agent_config *cfg, struct rules *out)
{
	landlock_base_rules(cfg, out);
	landlock_session_rules(cfg, out);
}

/* ---- readable except the hidden programs ---------------------------- */

static int compare(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int member(char *const *sorted, int n, const char *s)
{
	return n > 0 && bsearch(&s, sorted, (size_t)n, sizeof *sorted, compare) != NULL;
}

/* dir_of is Go's filepath.Dir for a clean absolute path. */
static char *dir_of(const char *p)
{
	const char *slash = strrchr(p, '/');
	if (!slash || slash == p)
		return strdup("/");
	return strndup(p, (size_t)(slash - p));
}

static char *join(const char *dir, const char *name)
{
	char *p;
	if (asprintf(&p, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name) < 0)
		return NULL;
	return p;
}

static void sort_unique(struct strings *s)
{
	if (s->n == 0)
		return;
	qsort(s->v, (size_t)s->n, sizeof *s->v, compare);
	int o = 1;
	for (int i = 1; i < s->n; i++) {
		if (strcmp(s->v[i], s->v[o - 1]) == 0)
			free(s->v[i]);
		else
			s->v[o++] = s->v[i];
	}
	s->n = o;
	s->v[o] = NULL;
}

/* landlock_readable_except grants reading everything but the hidden
 * files: listing any folder, and reading every file and folder that is
 * neither hidden nor above a hidden one; those folders are split into
 * their entries. Symbolic links get no rule: what they point at decides. */
/* landlock_split_dirs lists the folders above the hidden files, sorted. */
void landlock_split_dirs(char *const *hidden, int n, struct strings *split)
{
	for (int i = 0; i < n; i++) {
		char *d = dir_of(hidden[i]);
		while (d) {
			strings_add(split, d);
			char *up = strcmp(d, "/") ? dir_of(d) : NULL;
			free(d);
			d = up;
		}
	}
	sort_unique(split);
}

uint64_t landlock_fingerprint(const struct strings *split)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (int i = 0; i < split->n; i++) {
		struct stat st;
		long long v[6] = {-1, -1, -1, -1, -1, -1};
		if (stat(split->v[i], &st) == 0) {
			v[0] = (long long)st.st_dev, v[1] = (long long)st.st_ino;
			v[2] = st.st_mtim.tv_sec, v[3] = st.st_mtim.tv_nsec;
			v[4] = st.st_ctim.tv_sec, v[5] = st.st_ctim.tv_nsec;
		}
		const unsigned char *b = (const unsigned char *)v;
		for (size_t k = 0; k < sizeof v; k++)
			h = (h ^ b[k]) * 1099511628211ULL;
	}
	if (split->failed)
		h = ~h;
	return h;
}

void landlock_readable_except(char *const *hidden, int n, struct rules *out)
{
	if (n == 0) {
		rules_add(out, "/", read_rights);
		return;
	}
	struct strings hide = {0}, split = {0};
	for (int i = 0; i < n; i++)
		strings_add(&hide, hidden[i]);
	sort_unique(&hide);
	landlock_split_dirs(hidden, n, &split);
	struct rules dirs = {0}, files = {0};
	for (int i = 0; i < split.n; i++) {
		DIR *dir = opendir(split.v[i]);
		if (!dir)
			continue; /* not in this sandbox's view */
		struct dirent *e;
		while ((e = readdir(dir))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			char *p = join(split.v[i], e->d_name);
			if (!p) {
				out->failed = 1;
				break;
			}
			unsigned char type = e->d_type;
			struct stat st;
			if (type == DT_UNKNOWN && lstat(p, &st) == 0)
				type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
			if (member(split.v, split.n, p) || member(hide.v, hide.n, p) || type == DT_LNK) {
				/* no rule */
			} else if (type == DT_DIR) {
				rules_add(&dirs, p, read_rights);
			} else {
				rules_add(&files, p, LL_READ_FILE);
			}
			free(p);
		}
		closedir(dir);
	}
	rules_add(out, "/", LL_READ_DIR);
	for (int i = 0; i < dirs.n; i++)
		rules_add(out, dirs.v[i].path, dirs.v[i].access);
	for (int i = 0; i < files.n; i++)
		rules_add(out, files.v[i].path, files.v[i].access);
	if (hide.failed || split.failed || dirs.failed || files.failed)
		out->failed = 1;
	rules_free(&dirs);
	rules_free(&files);
	strings_free(&hide);
	strings_free(&split);
}

/* ---- executables and their interpreters ----------------------------- */

static uint64_t get(const unsigned char *p, int size, int big)
{
	uint64_t v = 0;
	for (int i = 0; i < size; i++)
		v |= (uint64_t)p[big ? size - 1 - i : i] << (8 * i);
	return v;
}

/* elf_interp reads the program interpreter from path's ELF program
 * headers, with the trailing NULs trimmed. */
int elf_interp(const char *path, struct buf *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	unsigned char h[64];
	int rc = -1;
	if (pread(fd, h, sizeof h, 0) < 52 || memcmp(h, ELFMAG, SELFMAG) != 0)
		goto out;
	int wide = h[EI_CLASS] == ELFCLASS64, big = h[EI_DATA] == ELFDATA2MSB;
	if ((h[EI_CLASS] != ELFCLASS32 && !wide) || (h[EI_DATA] != ELFDATA2LSB && !big))
		goto out;
	uint64_t phoff = wide ? get(h + 32, 8, big) : get(h + 28, 4, big);
	unsigned phentsize = (unsigned)get(h + (wide ? 54 : 42), 2, big);
	unsigned phnum = (unsigned)get(h + (wide ? 56 : 44), 2, big);
	if (phentsize < (wide ? 56u : 32u))
		goto out;
	for (unsigned i = 0; i < phnum && rc; i++) {
		unsigned char ph[56];
		if (pread(fd, ph, wide ? 56 : 32, (off_t)(phoff + (uint64_t)i * phentsize)) != (wide ? 56 : 32))
			break;
		if (get(ph, 4, big) != PT_INTERP)
			continue;
		uint64_t off = wide ? get(ph + 8, 8, big) : get(ph + 4, 4, big);
		uint64_t size = wide ? get(ph + 32, 8, big) : get(ph + 16, 4, big);
		if (size > 4096)
			break;
		char name[4097];
		if (pread(fd, name, size, (off_t)off) != (ssize_t)size)
			break;
		while (size > 0 && name[size - 1] == 0)
			size--;
		buf_put(out, name, size);
		rc = out->failed ? -1 : 0;
	}
out:
	close(fd);
	return rc;
}

static void add_once(struct strings *out, const char *p)
{
	if (!exists(p))
		return;
	for (int i = 0; i < out->n; i++)
		if (!strcmp(out->v[i], p))
			return;
	strings_add(out, p);
}

void landlock_executables(char *const *exes, int n, struct strings *out)
{
	for (int i = 0; i < n; i++) {
		add_once(out, exes[i]);
		struct buf interp = {0};
		if (elf_interp(exes[i], &interp) == 0 && interp.p) {
			add_once(out, interp.p);
			char *real = realpath(interp.p, NULL);
			if (real)
				add_once(out, real);
			free(real);
		}
		free(interp.p);
	}
}

/* ---- applying them -------------------------------------------------- */

uint64_t landlock_handled(int abi)
{
	if (abi < 1)
		return 0;
	if (abi < 2)
		return (1ULL << 13) - 1;
	if (abi < 3)
		return (1ULL << 14) - 1;
	if (abi < 5)
		return (1ULL << 15) - 1;
	return (1ULL << 16) - 1; /* V7 knows no file system right after IOCTL_DEV */
}

int landlock_begin(struct landlock *l, int refer, struct buf *err)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	*l = (struct landlock){.fd = -1, .spent = -1, .handled = landlock_handled(abi < 0 ? 0 : (int)abi)};
	/* No Landlock, or no "refer" when a rule needs it: go-landlock's
	 * best effort then restricts nothing. */
	if (!l->handled || (refer && !(l->handled & LL_REFER)))
		return 0;
	struct ruleset_attr attr = {.handled_access_fs = l->handled};
	l->fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (l->fd < 0) {
		buf_puts(err, "landlock_create_ruleset: ");
		buf_puts(err, strerror(errno));
		return -1;
	}
	return 0;
}

int landlock_add(struct landlock *l, const struct rules *rules, struct buf *err)
{
	for (int i = 0; i < rules->n && l->fd >= 0; i++) {
		uint64_t access = rules->v[i].access & l->handled;
		if (!access)
			continue;
		const char *what = "open";
		int fd = open(rules->v[i].path, O_PATH | O_CLOEXEC);
		if (fd >= 0) {
			struct path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
			what = "landlock_add_rule";
			if (syscall(SYS_landlock_add_rule, l->fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) == 0)
				what = NULL;
			int saved = errno;
			close(fd);
			errno = saved;
		}
		if (what) {
			char text[64];
			snprintf(text, sizeof text, "\" with access %#llx: ", (unsigned long long)access);
			buf_puts(err, "populating ruleset for \"");
			buf_puts(err, rules->v[i].path);
			buf_puts(err, text);
			buf_puts(err, what);
			buf_puts(err, ": ");
			buf_puts(err, strerror(errno));
			return -1;
		}
	}
	return 0;
}

int landlock_enforce(struct landlock *l, struct buf *err)
{
	if (l->fd < 0)
		return 0;
	int rc = 0;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		buf_puts(err, "prctl(PR_SET_NO_NEW_PRIVS): ");
		buf_puts(err, strerror(errno));
		rc = -1;
	} else if (syscall(SYS_landlock_restrict_self, l->fd, 0) < 0) {
		buf_puts(err, "landlock_restrict_self: ");
		buf_puts(err, strerror(errno));
		rc = -1;
	}
	if (rc == 0 && l->spent < 0)
		l->spent = l->fd;
	else
		close(l->fd);
	l->fd = -1;
	return rc;
}
