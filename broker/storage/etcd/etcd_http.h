/*
 * Internal: a client of etcd's v3 JSON gateway (libcurl + jansson).  C
 * has no good gRPC client and the gateway exists for this.  On that
 * gateway keys and values are base64 and 64-bit numbers are strings.
 */
#ifndef TSEC_STORAGE_ETCD_HTTP_H
#define TSEC_STORAGE_ETCD_HTTP_H

#include <stdatomic.h>

#include <jansson.h>

#include "broker/storage/fleet.h"
#include "common/http.h"

struct tsec__etcd_conn;

/* Connects lazily; reads the options' endpoints, TLS and auth files. */
int tsec__etcd_conn_open(struct tsec__etcd_conn **out, const struct tsec_store_opts *o,
			 struct tsec_error *err);
void tsec__etcd_conn_close(struct tsec__etcd_conn *c);

/* Seconds a kept connection may have been idle and still carry a
 * request that must run once (1; tests make it longer, so that no pause
 * of the machine decides what they count). */
extern long tsec__etcd_once_idle_s;

/* How a request may be retried on another endpoint when its outcome is
 * unknown (sent, then the connection failed or etcd timed out). */
enum { TSEC__ETCD_ONCE = 0, TSEC__ETCD_IDEMPOTENT = 1 };

/* How many requests c has sent (a resend counts again): tests count
 * round trips with it. */
uint64_t tsec__etcd_conn_requests(struct tsec__etcd_conn *c);
/* Bytes of watch streams looked at for a line's end (each once). */
uint64_t tsec__etcd_conn_scanned(struct tsec__etcd_conn *c);

/*
 * POSTs req (consumed) to path ("/v3/kv/txn") and parses the answer into
 * *resp.  Fails over to the next endpoint when a request cannot have
 * been applied (no connection, no leader), and for IDEMPOTENT requests
 * on any transport failure, within the call's deadline.  An unknown
 * outcome (a ONCE request sent, then no answer) is TSEC_EUNKNOWN: the
 * request may have been applied; any other failure is TSEC_EIO.  A
 * request longer than request_max is TSEC_ETOOBIG, unsent.
 *
 * An answer is read only as far as its request can need (issue 52, item
 * 3: every answer was taken up to 96 MiB and parsed whole, 77 times its
 * size in memory): 64 KiB, and for each of `values` key-values with their
 * value (each at most request_max: no value got in through a larger
 * request) and `keys` keys alone, their size in base64 and JSON.  Past
 * it: TSEC_ETOOBIG, the answer dropped.
 */
int tsec__etcd_post(struct tsec__etcd_conn *c, const char *path, json_t *req, int retry,
		    size_t values, size_t keys, json_t **resp, struct tsec_error *err);

/*
 * Watches [key, range_end) from revision start_rev (0: from now) and
 * calls fn for each answer object until fn returns nonzero,
 * tsec__etcd_watch_stop is called (returns 0) or the stream ends
 * (TSEC_EIO; the next watch tries the next endpoint).  One watch at a
 * time per connection.
 */
typedef int (*tsec__etcd_event_fn)(void *ctx, json_t *result);
int tsec__etcd_watch(struct tsec__etcd_conn *c, const char *key, size_t klen,
		     const char *range_end, size_t relen, int64_t start_rev,
		     tsec__etcd_event_fn fn, void *ctx, struct tsec_error *err);
void tsec__etcd_watch_stop(struct tsec__etcd_conn *c);

/* The longest line a watch stream may send (one answer object). */
#define TSEC__ETCD_LINE_MAX ((size_t)96 << 20)

/*
 * A watch stream being read: lines of JSON, each handed to fn (its
 * "result" member when it has one).  tsec__etcd_stream_take is the
 * stream's CURLOPT_WRITEFUNCTION (ud: the stream); it returns sz * nm,
 * or 0 to end the transfer when fn asked to stop or a line passed b.max.
 * Apart from the watch so that any bytes can be fed to it (fuzz_etcd).
 */
struct tsec__etcd_stream {
	struct tsec__http_body b;    /* a line's start; b.max bounds a line */
	tsec__etcd_event_fn fn;
	void *ctx;
	int stopped;
	atomic_ulong *scanned;       /* bytes looked at, each once */
};
size_t tsec__etcd_stream_take(char *d, size_t sz, size_t nm, void *ud);
/* Ends the running watch (if any) as failed: the next tries the next
 * endpoint. */
void tsec__etcd_watch_kick(struct tsec__etcd_conn *c);

/* ---- JSON helpers ---- */

/* A base64 string of p[0..n) (the gateway's bytes). */
json_t *tsec__b64(const void *p, size_t n);
/* Decodes base64 member `name` of o; *out is new (free()), NUL-terminated. */
int tsec__unb64(const json_t *o, const char *name, uint8_t **out, size_t *len);
/* A 64-bit number member, given as a string or a number; def if absent. */
int64_t tsec__jint(const json_t *o, const char *name, int64_t def);
/* A decimal string of v, for the gateway's 64-bit fields. */
json_t *tsec__jnum(int64_t v);

#endif
