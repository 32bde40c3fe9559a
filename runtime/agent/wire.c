#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

/* ---- the growable buffer -------------------------------------------- */

void buf_put(struct buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void buf_puts(struct buf *b, const char *s) { buf_put(b, s, strlen(s)); }

/* ---- writing -------------------------------------------------------- */

void json_put_string(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	buf_put(b, "\"", 1);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\') {
			char e[2] = {'\\', (char)*c};
			buf_put(b, e, 2);
		} else if (*c < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15]};
			buf_put(b, e, 6);
		} else {
			buf_put(b, (const char *)c, 1);
		}
	}
	buf_put(b, "\"", 1);
}

void json_put_int(struct buf *b, long long v)
{
	char s[32];
	snprintf(s, sizeof s, "%lld", v);
	buf_puts(b, s);
}

void json_put_strings(struct buf *b, char *const *v, int n)
{
	buf_put(b, "[", 1);
	for (int i = 0; i < n; i++) {
		if (i)
			buf_put(b, ",", 1);
		json_put_string(b, v[i]);
	}
	buf_put(b, "]", 1);
}

/* ---- reading -------------------------------------------------------- */

const char *json_skip_ws(const char *p, const char *end)
{
	while (p && p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int read_hex4(const char *p, const char *end, unsigned *v)
{
	if (end - p < 4)
		return -1;
	*v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(p[i]);
		if (h < 0)
			return -1;
		*v = *v << 4 | (unsigned)h;
	}
	return 0;
}

static void put_utf8(struct buf *b, unsigned cp)
{
	char u[4];
	if (cp < 0x80) {
		u[0] = (char)cp;
		buf_put(b, u, 1);
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		buf_put(b, u, 2);
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		buf_put(b, u, 3);
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		buf_put(b, u, 4);
	}
}

/* utf8_len is the length of the valid UTF-8 sequence at p, or 0 (Go's
 * utf8.DecodeRune: no overlong forms, no surrogates, nothing past
 * U+10FFFF). */
static int utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned char c = p[0];
	int n;
	unsigned lo = 0x80, hi = 0xbf;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		if (c == 0xe0)
			lo = 0xa0;
		if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		if (c == 0xf0)
			lo = 0x90;
		if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (end - p < n || p[1] < lo || p[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

const char *json_read_string(const char *p, const char *end, struct buf *out)
{
	if (!p || p >= end || *p != '"')
		return NULL;
	p++;
	while (p < end && *p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p != '\\') {
			int n = utf8_len((const unsigned char *)p, (const unsigned char *)end);
			if (out) {
				if (n)
					buf_put(out, p, (size_t)n);
				else
					put_utf8(out, 0xfffd);
			}
			p += n ? n : 1;
			continue;
		}
		if (++p >= end)
			return NULL;
		char c = *p++, e = 0;
		switch (c) {
		case '"': case '\\': case '/': e = c; break;
		case 'b': e = '\b'; break;
		case 'f': e = '\f'; break;
		case 'n': e = '\n'; break;
		case 'r': e = '\r'; break;
		case 't': e = '\t'; break;
		case 'u': {
			unsigned cp, lo;
			if (read_hex4(p, end, &cp))
				return NULL;
			p += 4;
			if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
			    !read_hex4(p + 2, end, &lo) && lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				p += 6;
			} else if (cp >= 0xd800 && cp < 0xe000) {
				cp = 0xfffd;
			}
			if (out)
				put_utf8(out, cp);
			continue;
		}
		default:
			return NULL;
		}
		if (out)
			buf_put(out, &e, 1);
	}
	return p < end ? p + 1 : NULL;
}

int json_literal(const char *p, const char *end, const char *word)
{
	size_t n = strlen(word);
	return p && (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}

static const char *skip_digits(const char *p, const char *end)
{
	const char *start = p;
	while (p < end && *p >= '0' && *p <= '9')
		p++;
	return p > start ? p : NULL;
}

/* skip_number follows JSON's grammar exactly, as Go's scanner does. */
static const char *skip_number(const char *p, const char *end)
{
	if (p < end && *p == '-')
		p++;
	if (p < end && *p == '0')
		p++;
	else if (!(p = skip_digits(p, end)))
		return NULL;
	if (p < end && *p == '.' && !(p = skip_digits(p + 1, end)))
		return NULL;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		p = skip_digits(p, end);
	}
	return p;
}

/* Go's decoder nests at most this deep. */
#define MAX_DEPTH 10000

const char *json_skip_value(const char *p, const char *end, int depth)
{
	p = json_skip_ws(p, end);
	if (!p || p >= end || depth > MAX_DEPTH)
		return NULL;
	if (*p == '"')
		return json_read_string(p, end, NULL);
	if (*p == '{' || *p == '[') {
		char close = *p == '{' ? '}' : ']';
		p = json_skip_ws(p + 1, end);
		if (p < end && *p == close)
			return p + 1;
		for (;;) {
			if (close == '}') {
				p = json_skip_ws(json_read_string(json_skip_ws(p, end), end, NULL), end);
				if (!p || p >= end || *p++ != ':')
					return NULL;
			}
			p = json_skip_ws(json_skip_value(p, end, depth + 1), end);
			if (!p || p >= end)
				return NULL;
			if (*p == ',') {
				p++;
				continue;
			}
			return *p == close ? p + 1 : NULL;
		}
	}
	static const char *const words[] = {"true", "false", "null"};
	for (size_t i = 0; i < 3; i++)
		if (json_literal(p, end, words[i]))
			return p + strlen(words[i]);
	return skip_number(p, end);
}

/* fold_key makes a key compare as Go's field matching does: ASCII case
 * folded, and the two non-ASCII letters that fold to ASCII ones (the long
 * s and the Kelvin sign). */
static void fold_key(struct buf *key)
{
	size_t o = 0;
	for (size_t i = 0; i < key->len; i++) {
		char c = key->p[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		else if (key->len - i >= 2 && memcmp(key->p + i, "\xc5\xbf", 2) == 0) {
			c = 's';
			i += 1;
		} else if (key->len - i >= 3 && memcmp(key->p + i, "\xe2\x84\xaa", 3) == 0) {
			c = 'k';
			i += 2;
		}
		key->p[o++] = c;
	}
	key->len = o;
	key->p[o] = 0;
}

int json_for_each_member(const char *p, const char *end, void *ctx, member_fn f)
{
	p = json_skip_ws(p, end);
	if (json_literal(p, end, "null"))
		return 0;
	if (p >= end || *p != '{')
		return -1;
	p = json_skip_ws(p + 1, end);
	if (p < end && *p == '}')
		return 0;
	for (;;) {
		struct buf key = {0};
		buf_put(&key, "", 0);
		p = json_read_string(json_skip_ws(p, end), end, &key);
		if (!p || key.failed) {
			free(key.p);
			return -1;
		}
		fold_key(&key);
		p = json_skip_ws(p, end);
		if (p >= end || *p++ != ':') {
			free(key.p);
			return -1;
		}
		const char *v = json_skip_ws(p, end);
		int rc = f(ctx, key.p, v, end);
		free(key.p);
		if (rc)
			return -1;
		p = json_skip_ws(json_skip_value(v, end, 1), end);
		if (!p || p >= end)
			return -1;
		if (*p == ',') {
			p++;
			continue;
		}
		return *p == '}' ? 0 : -1;
	}
}

int json_whole(const char *msg, size_t len)
{
	const char *p = json_skip_ws(json_skip_value(msg, msg + len, 0), msg + len);
	return p == msg + len ? 0 : -1;
}

/* ---- the command line --------------------------------------------- */

/* cli_flag splits "-name", "--name" or "--name=value" into name and value
 * (value NULL when there is no '='). It returns -1 for "---x". */
int cli_flag(const char *arg, char *name, size_t size, const char **value)
{
	const char *s = arg + 1;
	if (*s == '-')
		s++;
	if (*s == '-' || *s == '=' || !*s)
		return -1;
	const char *eq = strchr(s, '=');
	size_t n = eq ? (size_t)(eq - s) : strlen(s);
	if (n >= size)
		return -1;
	memcpy(name, s, n);
	name[n] = 0;
	*value = eq ? eq + 1 : NULL;
	return 0;
}

/* ---- messages ------------------------------------------------------- */

int wire_send(int sock, const char *data, size_t len, const int *fds, int nfds)
{
	struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
	union {
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		memset(&u, 0, sizeof u);
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)len ? 0 : -1;
}

ssize_t wire_receive(int sock, char *data, size_t size, int *fds, int *nfds)
{
	union {
		char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = data, .iov_len = size};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	ssize_t n;
	if (nfds)
		*nfds = 0;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); n >= 0 && c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t j = 0; j < k; j++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + j * sizeof(int), sizeof fd);
			if (fds && *nfds < MAX_FDS)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if (n >= 0 && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return -2;
	return n;
}
