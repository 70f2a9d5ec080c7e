/*
 * Internal: what every libcurl user here shares (the etcd gateway
 * client, the S3 blob provider): one global initialisation, a small pool
 * of easy handles (each keeps its connection alive for the next
 * request), a bounded answer buffer, and the options every request sets.
 * libcurl does HTTP, TLS, SigV4 and connection reuse; this only keeps
 * the two callers from doing the same thing two ways.
 */
#ifndef TSEC_COMMON_HTTP_H
#define TSEC_COMMON_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "common/error.h"

/* curl_global_init once per process: 0, or TSEC_EIO with err filled. */
int tsec__http_global(struct tsec_error *err);

/* Handles kept for reuse (threads beyond it make and drop their own). */
#define TSEC__HTTP_POOL 32

struct tsec__http_pool {
	pthread_mutex_t mu;
	CURL *h[TSEC__HTTP_POOL];
	size_t n;
};

void tsec__http_pool_init(struct tsec__http_pool *p);
/* Cleans up every handle kept; none may be out. */
void tsec__http_pool_destroy(struct tsec__http_pool *p);
/* A handle with no options set (reset, its connection kept), or a new
 * one; NULL without memory. */
CURL *tsec__http_take(struct tsec__http_pool *p);
/* Keeps h for the next request, or cleans it up when the pool is full. */
void tsec__http_give(struct tsec__http_pool *p, CURL *h);

/*
 * An answer, NUL-terminated, at most max bytes (over: the transfer fails
 * with CURLE_WRITE_ERROR and `over` says why).  Free p with free() (or
 * tsec__http_body_wipe for answers that held secrets).
 */
struct tsec__http_body {
	char *p;
	size_t n, cap, max;
	bool over;
};

/* CURLOPT_WRITEFUNCTION for a struct tsec__http_body. */
size_t tsec__http_on_body(char *d, size_t sz, size_t nm, void *ud);
/* Zeroes and frees the answer (a token, a password's echo). */
void tsec__http_body_wipe(struct tsec__http_body *b);

/*
 * The options every request here sets: no signals (threads), http and
 * https only, no redirects (a redirect could carry credentials to
 * another host), TCP_NODELAY; with timeout_ms > 0 that whole-request
 * timeout, and with connect_ms > 0 that connect timeout; the CA file
 * when ca is neither NULL nor empty.
 */
void tsec__http_defaults(CURL *h, long timeout_ms, long connect_ms, const char *ca);

#endif
