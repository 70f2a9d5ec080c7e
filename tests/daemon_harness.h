/* The tsec-broker the daemon suites drive (tests/daemon_harness.c). */
#ifndef TSEC_TESTS_DAEMON_HARNESS_H
#define TSEC_TESTS_DAEMON_HARNESS_H

#include <sys/types.h>

#include <jansson.h>

#include "tinysecurity/client.h"

struct daemon_harness {
	char dir[64];
	char policy[128], config[128], log[128], err[128];
	char ipc[160], tcp[64], metrics[64];
	char srv_pub[41], srv_sec[41];
	char good_pub[41], good_sec[41], bad_pub[41], bad_sec[41], unk_pub[41], unk_sec[41];
	unsigned char sign_pk[32], sign_sk[64];
	pid_t pid;
};
extern struct daemon_harness D;

#define S(lit) { lit, sizeof(lit) - 1 }

extern const char *policy_v1;
extern const char *policy_v2;
void write_file(const char *path, const char *text);
void write_policy(const char *text, int revision);
void sign_policy(void);
int free_port(void);
/* A client of the broker as who ("good", "bad", "ipc", "unknown").  Its
 * calls' deadline is timeout_ms but never under TU_CALL_MS: a deadline
 * catches a hang, it never judges speed (a lock.acquire found no answer
 * in 10 s with two test runs and clang builds beside it; an unknown key's
 * refusal had 400 ms to arrive). */
#define TU_CALL_MS 60000
struct tsec_client *client(const char *who, int timeout_ms);
/* A client whose deadline is timeout_ms exactly: for a test whose point
 * is a caller that gives up (and the broker's readiness probe). */
struct tsec_client *client_within(const char *who, int timeout_ms);
json_t *stats(void);
long stat_of(const char *name);
void start_broker(void);
/* The folder, paths, ports and keys of D for a suite called name (0, -1). */
int harness_dir(const char *name);
int setup(void **state);
int teardown(void **state);
extern const struct tsec_request load_req;
int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A reload by RPC as the admin caller "good": want its code, and (when
 * says is given) these words in its message. */
void reload_rpc_says(int want, const char *says);
void reload_rpc(int want);

#endif
