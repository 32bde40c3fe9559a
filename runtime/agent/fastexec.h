#ifndef WARDEN_FASTEXEC_H
#define WARDEN_FASTEXEC_H

#include <stddef.h>
#include <stdint.h>

/* daemon.ProtocolVersion: the version of the requests this client sends */
#define FASTEXEC_PROTOCOL_VERSION 1

/* policies.MaxPolicyFile */
#define MAX_POLICY_FILE (1 << 20)

/* runtime.DefaultRoot */
#define FASTEXEC_DEFAULT_ROOT "/run/warden"

int fastexec_valid_utf8(const char *s);
int fastexec_parse_duration(const char *s, int64_t *out);
char *fastexec_json_string(const char *s);
int fastexec_parse_reply(const char *msg, size_t len, int *has_error, char **error, char **code, int *has_result,
			 int *exit_code, char **result_error);
char *fastexec_clean(const char *path);
char *fastexec_abs(const char *path);
char *fastexec_dir(const char *path);

#endif
