// What the fast path and the agent share: a growable buffer, JSON written
// and read the way Go's encoding/json does, and one message on a
// SOCK_SEQPACKET socket (runtime/sandbox/agentwire.go).
#ifndef WARDEN_WIRE_H
#define WARDEN_WIRE_H

#include <stddef.h>
#include <sys/types.h>

#define MAX_MESSAGE (1 << 20) /* runtime.maxMessage */
#define MAX_FDS 4             /* runtime.maxFDs */
#define EXIT_WARDEN 125

struct buf {
	char *p;
	size_t len, cap;
	int failed;
};

void buf_put(struct buf *b, const char *s, size_t n);
void buf_puts(struct buf *b, const char *s);
void json_put_string(struct buf *b, const char *s);
void json_put_int(struct buf *b, long long v);
void json_put_strings(struct buf *b, char *const *v, int n);

const char *json_skip_ws(const char *p, const char *end);
/* json_read_string reads the string at p into out (when not NULL), with
 * invalid UTF-8 replaced as Go does; it returns the position after it. */
const char *json_read_string(const char *p, const char *end, struct buf *out);
/* json_skip_value returns the position after the valid JSON value at p. */
const char *json_skip_value(const char *p, const char *end, int depth);
/* json_literal is 1 when the value at p is the literal word. */
int json_literal(const char *p, const char *end, const char *word);

/* json_for_each_member calls f for every member of the object at p, with
 * the key folded as Go matches field names; p may also be null. A non-zero
 * return of f stops it with -1. */
typedef int (*member_fn)(void *ctx, const char *key, const char *value, const char *end);
int json_for_each_member(const char *p, const char *end, void *ctx, member_fn f);
/* json_whole is 0 when the message is one valid value and nothing else. */
int json_whole(const char *msg, size_t len);

/* cli_flag splits "-name", "--name" or "--name=value"; -1 for "---x". */
int cli_flag(const char *arg, char *name, size_t size, const char **value);

int wire_send(int sock, const char *data, size_t len, const int *fds, int nfds);
/* wire_receive reads one message. The descriptors that came with it go
 * to fds (up to MAX_FDS, close-on-exec), or are closed when fds is NULL.
 * It returns the length, -1 with errno, or -2 when the message or its
 * descriptors did not fit. */
ssize_t wire_receive(int sock, char *data, size_t size, int *fds, int *nfds);

#endif
