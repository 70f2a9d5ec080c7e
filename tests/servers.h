/*
 * Real etcd and redis servers for the tests: started on loopback ports
 * with a temporary data folder, stopped (and the folder removed) by
 * tu_server_stop, and killed with the test process if it dies first
 * (PR_SET_PDEATHSIG).  A test that finds no etcd or redis-server
 * installed fails: `make test` installs them (scripts/deps.sh).
 */
#ifndef TSEC_TESTS_SERVERS_H
#define TSEC_TESTS_SERVERS_H

#include <stdbool.h>
#include <sys/types.h>

#include "tests/sigv4.h"

#define TU_MEMBERS_MAX 3

struct tu_server {
	int n;                       /* members */
	pid_t pid[TU_MEMBERS_MAX];
	int client_port[TU_MEMBERS_MAX], peer_port[TU_MEMBERS_MAX];
	char dir[64];
	char endpoints[256];         /* for tsec_store_opts.endpoints */
	char url[TU_MEMBERS_MAX][64];
	char tls[64];                /* with TLS: the folder of ca.pem, server.pem,
					server-key.pem; clients must show a
					certificate of that CA */
	struct tu_sigv4_proxy *sigv4; /* S3: the signature-checking proxy */
};

/* In a forked child, first: it is killed when the test process (parent,
 * its pid before the fork) ends, however it ends, so a broker or server
 * a test started never outlives a test that died (an abort, a sanitizer's
 * halt, a kill).  Exits at once if parent is gone already. */
void tu_child_dies_with(pid_t parent);

/* One etcd member, or a cluster of n (1..3).  Returns 0 or -1. */
int tu_etcd_start(struct tu_server *s, int n);
/*
 * One etcd member over https with client certificates: makes a CA, a
 * server certificate for 127.0.0.1 and a client certificate (client.pem,
 * client-key.pem) in s->tls with the openssl command.
 */
int tu_etcd_start_tls(struct tu_server *s);
/* One redis-server (appendfsync always). */
int tu_redis_start(struct tu_server *s);
/* One redis-server speaking TLS only (certificates as tu_etcd_start_tls
 * makes them; clients must show one of the CA's). */
int tu_redis_start_tls(struct tu_server *s);
/*
 * Kills the redis-server and starts it again on the same port, with its
 * data (keep_data: its append-only file) or as a restart without
 * persistence would (nothing).  0, or -1.
 */
int tu_redis_restart(struct tu_server *s, bool keep_data);
/*
 * An S3-compatible server (the npm package s3rver, on node) with the
 * bucket "tsec-test", keys S3RVER / S3RVER, behind the tests' SigV4
 * proxy (tests/sigv4.h; s3rver checks no signature, the proxy does, as
 * S3 would, and refuses what does not verify): s->url[0] is its endpoint
 * for path-style requests, s->url[1] for virtual-host style
 * (tsec-test.s3.localhost), s->url[2] s3rver itself, unchecked.  -1
 * when node or s3rver is missing (scripts/deps.sh servers installs it)
 * or it does not come up.
 */
int tu_s3_start(struct tu_server *s);
/* Stops every member still running and removes the data folder. */
void tu_server_stop(struct tu_server *s);

/*
 * Servers die with the thread that started them (PR_SET_PDEATHSIG, so a
 * crashed test leaves none behind): start and restart them from the
 * test's main thread.
 */

/* Kills member i (SIGKILL) and reaps it. */
void tu_member_kill(struct tu_server *s, int i);
/* Starts member i again on its data folder; waits until it answers. */
int tu_member_restart(struct tu_server *s, int i);
/* The index of the etcd cluster's leader, or -1. */
int tu_etcd_leader(struct tu_server *s);

/* Adds user (with the root role) and turns etcd's authentication on. */
int tu_etcd_enable_auth(struct tu_server *s, const char *user, const char *password);

/* Writes key[0..klen) = val straight into etcd (what another writer
 * could plant).  0 or -1. */
int tu_etcd_put_raw(struct tu_server *s, const char *key, size_t klen, const char *val);

/*
 * GET url (or POST post); the HTTP status, or -1 when no answer came;
 * the body into out[0..cap) (cut, NUL-terminated) when out is given.
 */
long tu_http(const char *url, const char *post, char *out, size_t cap, long timeout_ms);

/*
 * Ends lock `name`'s lease on the redis server s under prefix now, as
 * redis does when the lease's time is up (its key goes): a test ends a
 * lease without waiting its length out, however loaded the machine.
 */
void tu_redis_lease_end(const struct tu_server *s, const char *prefix, const char *name);

/* Whether etcd and redis-server are installed. */
bool tu_have(const char *program);

#endif
