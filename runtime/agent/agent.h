// agent.c: the sandbox agent, PID 1 of every session. Its request parsing
// and program lookup are named here for the Go tests (through agent.go);
// struct strings and struct agent_config are shared with landlock.c.
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
	struct strings stubs;    /* --stubs: the sandbox paths of command-rule stubs */
	int *stub_prog;          /* the program each stub stands for */
	int pooled;
};

/* STUB_SOCKET is the abstract socket name (after its NUL) the stubs of
 * ruled programs call the agent on. */
#define STUB_SOCKET "warden-commands"

/* sandbox.execRequest */
struct request {
	struct strings argv, env;
	char *cwd;
	int tty, seal;
	unsigned rows, cols;
	int rules;        /* the host's command-rules channel */
	int egress;       /* the host's egress channel (gVisor) */
	int killall;      /* kill every process but the agent (gVisor) */
	int ready;        /* the host asks whether the agent serves yet */
	long long upstream; /* on that channel: the id of the upstream passed with it */
	long long run;    /* 1 + the ruled program the host approved, for a stub argv[0] */
	char *path;       /* a stub's: the path it was started by */
	struct strings binds; /* with seal: the folders a pooled gVisor agent binds, FLAGS:PATH */
	int nul; /* a string held a NUL byte, which no C string can carry */
};

int agent_parse_request(const char *msg, size_t len, struct request *r);
void agent_free_request(struct request *r);

/* sandbox.execControl */
struct control {
	long long signal;
	int kill;
	long long rows, cols; /* a resize of the terminal the agent relays (gVisor) */
};

int agent_parse_control(const char *msg, size_t len, struct control *c);

/* sandbox.execEvent */
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

#endif
