/*
 * etcd's v3 JSON gateway over libcurl (etcd_http.h).  Each request takes
 * a pooled curl handle (each keeps its connection alive), so threads do
 * not share a handle and a request costs no new connection.  Endpoints
 * are tried in turn; the one that answered last is tried first.
 */
#include <errno.h>
#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "broker/storage/etcd/etcd_http.h"
#include "common/clock.h"
#include "common/http.h"

#define ENDPOINTS_MAX 16
#define BACKOFF_MAX_MS 200
#define ATTEMPT_MIN_MS 250       /* the least one member is given */

struct tsec__etcd_conn {
	char *ep[ENDPOINTS_MAX];
	size_t nep;
	atomic_uint cur;
	uint32_t timeout_ms;
	size_t request_max;
	char *ca, *cert, *key;
	bool auth;
	char user[256], pass[512];
	pthread_mutex_t mu;          /* the token, the watch */
	struct tsec__http_pool pool;  /* handles for requests (not the watch) */
	char token[512];
	unsigned token_gen;
	CURLM *watch;                /* the running watch, to wake it */
	atomic_int watch_stop;
	atomic_int watch_kick;       /* end the running watch, try the next */
	atomic_ulong requests;       /* requests sent (tsec__etcd_requests) */
	atomic_ulong scanned;        /* watch stream bytes looked at for a newline */
};

void tsec__etcd_conn_close(struct tsec__etcd_conn *c)
{
	if (!c)
		return;
	tsec__http_pool_destroy(&c->pool);
	for (size_t i = 0; i < c->nep; i++)
		free(c->ep[i]);
	free(c->ca);
	free(c->cert);
	free(c->key);
	sodium_memzero(c->pass, sizeof(c->pass));
	sodium_memzero(c->token, sizeof(c->token));
	pthread_mutex_destroy(&c->mu);
	free(c);
}

int tsec__etcd_conn_open(struct tsec__etcd_conn **out, const struct tsec_store_opts *o,
			 struct tsec_error *err)
{
	struct tsec__etcd_conn *c;
	const char *p;
	int rc;

	*out = NULL;
	if ((rc = tsec__http_global(err)))
		return rc;
	if (!o->endpoints || !*o->endpoints)
		return tsec__seterr(err, TSEC_EINVAL, "endpoints",
				    "etcd needs endpoints (\"http://127.0.0.1:2379\")");
	if (!(c = calloc(1, sizeof(*c))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	pthread_mutex_init(&c->mu, NULL);
	tsec__http_pool_init(&c->pool);
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : TSEC__REMOTE_TIMEOUT_MS;
	c->request_max = o->request_max ? o->request_max : TSEC__ETCD_REQUEST_MAX;
	for (p = o->endpoints; *p;) {
		size_t n = strcspn(p, ", ");

		if (n) {
			if (c->nep == ENDPOINTS_MAX) {
				rc = tsec__seterr(err, TSEC_EINVAL, "endpoints",
						  "more than %d endpoints", ENDPOINTS_MAX);
				goto fail;
			}
			if ((n < 8 || strncmp(p, "http://", 7)) && (n < 9 || strncmp(p, "https://", 8))) {
				rc = tsec__seterr(err, TSEC_EINVAL, "endpoints",
						  "etcd endpoint '%.*s' is not http:// or https://",
						  (int)(n > 64 ? 64 : n), p);
				goto fail;
			}
			if (!(c->ep[c->nep++] = strndup(p, n))) {
				rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
				goto fail;
			}
		}
		p += n;
		p += strspn(p, ", ");
	}
	if (!c->nep) {
		rc = tsec__seterr(err, TSEC_EINVAL, "endpoints", "no etcd endpoint");
		goto fail;
	}
	if ((o->tls_ca && !(c->ca = strdup(o->tls_ca))) ||
	    (o->tls_cert && !(c->cert = strdup(o->tls_cert))) ||
	    (o->tls_key && !(c->key = strdup(o->tls_key)))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto fail;
	}
	if (!!o->tls_cert != !!o->tls_key) {
		rc = tsec__seterr(err, TSEC_EINVAL, "tls_cert",
				  "a client certificate needs its key (tls_cert and tls_key)");
		goto fail;
	}
	if (o->username || o->password_file) {
		if (!o->username || !o->password_file || !*o->username ||
		    strlen(o->username) >= sizeof(c->user)) {
			rc = tsec__seterr(err, TSEC_EINVAL, "username",
					  "etcd authentication needs username and password_file");
			goto fail;
		}
		snprintf(c->user, sizeof(c->user), "%s", o->username);
		if ((rc = tsec__password_load(o->password_file, c->pass, sizeof(c->pass), err)))
			goto fail;
		c->auth = true;
	}
	*out = c;
	return 0;
fail:
	tsec__etcd_conn_close(c);
	return rc;
}

/*
 * The body of a request that must run once, handed to libcurl by a read
 * function that cannot go back.  libcurl sends a request again, by
 * itself, when a connection it reused dies before any answer: right for
 * a read, a ghost write for a request that must run once (a peer's
 * write in between would be undone; test_etcd_lost_answer).  With no
 * way back to the body's start, that second send fails instead
 * (CURLE_SEND_FAIL_REWIND), and `off` says the whole body was handed
 * on: its outcome is unknown.  So such a request may use a kept
 * connection too: before, each took a new one (a TCP and, on https, a
 * TLS handshake; two a renewal turn, issue 36).
 */
long tsec__etcd_once_idle_s = 1;

struct once_body {
	const char *p;
	size_t len, off;
};

static size_t once_read(char *buf, size_t size, size_t nitems, void *arg)
{
	struct once_body *ob = arg;
	size_t k = ob->len - ob->off;

	if (k > size * nitems)
		k = size * nitems;
	memcpy(buf, ob->p + ob->off, k);
	ob->off += k;
	return k;
}

static int once_seek(void *arg, curl_off_t offset, int origin)
{
	const struct once_body *ob = arg;

	return origin == SEEK_SET && offset == 0 && ob->off == 0 ? CURL_SEEKFUNC_OK
								  : CURL_SEEKFUNC_FAIL;
}

/* h (a reset handle) set for one POST of body to url (through ob when it
 * must run once), its answer into b. */
static void setup(struct tsec__etcd_conn *c, CURL *h, const char *url, const char *body,
		  struct once_body *ob, struct curl_slist *hdr, struct tsec__http_body *b,
		  long timeout_ms)
{
	curl_easy_reset(h);              /* after authenticate() on the same handle */
	curl_easy_setopt(h, CURLOPT_URL, url);
	if (ob) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)ob->len);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, once_read);
		curl_easy_setopt(h, CURLOPT_READDATA, ob);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, once_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, ob);
		/* A connection idle for a second or more is not reused for
		 * it: a server or a proxy between may be closing it as we
		 * send, which would make a write that never arrived an
		 * unknown outcome. */
		curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, tsec__etcd_once_idle_s);
	} else {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, tsec__http_on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
	tsec__http_defaults(h, timeout_ms, timeout_ms > 0 ? (timeout_ms < 1000 ? timeout_ms : 1000) : 0,
			    c->ca);
	if (c->cert) {
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->key);
	}
}

/* What one attempt came to. */
enum outcome { OK, NOT_SENT, UNKNOWN, FAILED, REAUTH };

/* Classifies an error answer of the gateway ({"error","code","message"}). */
static enum outcome gw_error(const json_t *j, long status, int *code, struct tsec_error *err,
			     const char *url)
{
	const char *m = json_string_value(json_object_get(j, "message"));
	int g = (int)tsec__jint(j, "code", -1);

	if (!m)
		m = json_string_value(json_object_get(j, "error"));
	if (!m)
		m = "no message";
	/* No leader, or refused before it was proposed.  ("server stopped"
	 * is not here: a member may stop after it proposed the request.) */
	if (g == 14 && (strstr(m, "no leader") || strstr(m, "not capable") ||
			strstr(m, "too many requests")))
		return NOT_SENT;
	if (g == 8)
		return NOT_SENT;         /* too many requests: refused, retry */
	if (g == 16 && strstr(m, "invalid auth token"))
		return REAUTH;
	if (g == 14 || g == 4 || status >= 500) {
		tsec__seterr(err, TSEC_EIO, url, "etcd at %s: %s", url, m);
		return UNKNOWN;
	}
	*code = strstr(m, "request is too large") ? TSEC_ETOOBIG
		: g == 5 ? TSEC_ENOENT
		: g == 7 || g == 16 || strstr(m, "user name is empty") ||
		  strstr(m, "authentication failed") || strstr(m, "permission denied")
		? TSEC_EDENIED : TSEC_EIO;
	tsec__seterr(err, *code, url, "etcd at %s: %s", url, m);
	return FAILED;
}

static int authenticate(struct tsec__etcd_conn *c, CURL *h, const char *base, long tmo,
			unsigned seen_gen, struct tsec_error *err);

/*
 * What a transfer that failed (cc, libcurl's words in why) came to at
 * endpoint ep: whether the request may have been applied.  short_body:
 * not all of the body was sent.
 */
static enum outcome transfer_failed(const char *ep, CURLcode cc, const char *why,
				    bool short_body, size_t max, int *code,
				    struct tsec_error *err)
{
	tsec__seterr(err, TSEC_EIO, ep, "etcd at %s: %s", ep, why[0] ? why : curl_easy_strerror(cc));
	/* The server's TLS refused our certificate (TLS 1.3 says so only at
	 * the first read): it handed nothing on. */
	if ((cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR) && strstr(why, "alert") &&
	    strstr(why, "certificate")) {
		*code = TSEC_EIO;
		return FAILED;
	}
	/* Not connected, or the body not all written: the gateway acts on a
	 * whole body only, so nothing was applied. */
	if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
	    cc == CURLE_COULDNT_RESOLVE_PROXY || cc == CURLE_SSL_CONNECT_ERROR || short_body)
		return NOT_SENT;
	if (cc == CURLE_WRITE_ERROR) {
		*code = tsec__seterr(err, TSEC_ETOOBIG, ep, "etcd's answer is larger than %zu bytes",
				     max);
		return FAILED;
	}
	return UNKNOWN;
}

/* One request to one endpoint. */
/*
 * The token as an Authorization header on *hdr, authenticating first
 * when none is held; *gen the token's generation (a request refused for
 * its token clears it only if no one renewed it since).  0, or
 * authenticate's error.
 */
static int auth_header(struct tsec__etcd_conn *c, CURL *h, size_t ep, long tmo,
		       struct curl_slist **hdr, unsigned *gen, struct tsec_error *err)
{
	struct curl_slist *h2;
	char auth[600];
	int rc;

	pthread_mutex_lock(&c->mu);
	*gen = c->token_gen;
	if (!c->token[0]) {
		pthread_mutex_unlock(&c->mu);
		if ((rc = authenticate(c, h, c->ep[ep], tmo, *gen, err)))
			return rc;
		pthread_mutex_lock(&c->mu);
		*gen = c->token_gen;
	}
	snprintf(auth, sizeof(auth), "Authorization: %s", c->token);
	pthread_mutex_unlock(&c->mu);
	if ((h2 = curl_slist_append(*hdr, auth)))
		*hdr = h2;
	sodium_memzero(auth, sizeof(auth));
	return 0;
}

static enum outcome attempt(struct tsec__etcd_conn *c, CURL *h, size_t ep, const char *path,
			    const char *body, long tmo, bool once, size_t max, json_t **resp,
			    int *code, struct tsec_error *err)
{
	struct curl_slist *hdr = NULL;
	struct tsec__http_body b = { .max = max };
	char url[512];
	enum outcome oc;
	long status = 0;
	json_error_t je;
	unsigned gen = 0;
	curl_off_t up = 0;
	struct once_body ob = { body, strlen(body), 0 };
	char why[CURL_ERROR_SIZE];
	CURLcode cc;
	json_t *j;

	snprintf(url, sizeof(url), "%s%s", c->ep[ep], path);
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	if (c->auth && strcmp(path, "/v3/auth/authenticate")) {
		int arc = auth_header(c, h, ep, tmo, &hdr, &gen, err);

		if (arc) {
			curl_slist_free_all(hdr);
			/* Refused credentials are refused everywhere. */
			if (arc == TSEC_EDENIED) {
				*code = arc;
				return FAILED;
			}
			return NOT_SENT;
		}
	}
	if (!hdr) {
		*code = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		return FAILED;
	}
	setup(c, h, url, body, once ? &ob : NULL, hdr, &b, tmo);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, why);
	why[0] = '\0';
	atomic_fetch_add(&c->requests, 1);
	cc = curl_easy_perform(h);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &up);
	curl_slist_free_all(hdr);
	if (cc != CURLE_OK) {
		free(b.p);
		if (cc == CURLE_SEND_FAIL_REWIND)  /* libcurl wanted to send it again */
			snprintf(why, sizeof(why), "the connection closed before any answer");
		return transfer_failed(c->ep[ep], cc, why,
				       once ? ob.off < ob.len : up < (curl_off_t)ob.len, b.max,
				       code, err);
	}
	j = b.p ? json_loadb(b.p, b.n, 0, &je) : NULL;
	free(b.p);
	if (!j) {
		tsec__seterr(err, TSEC_EIO, c->ep[ep], "etcd at %s answered HTTP %ld without JSON",
			     c->ep[ep], status);
		return status >= 500 ? UNKNOWN : (*code = TSEC_EIO, FAILED);
	}
	if (status != 200 || json_object_get(j, "error")) {
		oc = gw_error(j, status, code, err, c->ep[ep]);
		json_decref(j);
		if (oc == REAUTH) {
			pthread_mutex_lock(&c->mu);
			if (c->token_gen == gen)
				c->token[0] = '\0';
			pthread_mutex_unlock(&c->mu);
		}
		return oc;
	}
	*resp = j;
	return OK;
}

/*
 * Whether a token is one: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+"
 * / "/" ) *"=" (RFC 6750's b64token), what etcd's simple and JWT tokens
 * are.
 */
static bool token_ok(const char *t)
{
	size_t i = 0;

	while (t[i] && (isalnum((unsigned char)t[i]) || strchr("-._~+/", t[i])))
		i++;
	if (i == 0)
		return false;
	while (t[i] == '=')
		i++;
	return t[i] == '\0';
}

static int authenticate(struct tsec__etcd_conn *c, CURL *h, const char *base, long tmo,
			unsigned seen_gen, struct tsec_error *err)
{
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	struct tsec__http_body b = { .max = 1 << 16 };
	json_t *req = json_pack("{ssss}", "name", c->user, "password", c->pass), *j = NULL;
	char url[512], *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	const char *tok;
	long status = 0;
	CURLcode cc;
	int rc = 0;

	json_decref(req);
	if (!hdr || !body) {
		curl_slist_free_all(hdr);
		free(body);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	snprintf(url, sizeof(url), "%s/v3/auth/authenticate", base);
	setup(c, h, url, body, NULL, hdr, &b, tmo);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdr);
	sodium_memzero(body, strlen(body));
	free(body);
	if (cc == CURLE_OK && b.p)
		j = json_loadb(b.p, b.n, 0, NULL);
	tsec__http_body_wipe(&b);
	tok = json_string_value(json_object_get(j, "token"));
	if (cc != CURLE_OK)
		rc = tsec__seterr(err, TSEC_EIO, base, "etcd at %s: %s", base, curl_easy_strerror(cc));
	else if (status >= 500 || (status == 200 && (!tok || strlen(tok) >= sizeof(c->token))))
		rc = tsec__seterr(err, TSEC_EIO, base, "etcd at %s could not authenticate now "
				  "(HTTP %ld)", base, status);
	else if (status == 200 && !token_ok(tok))
		/* It goes into every later request's Authorization header: a
		 * CR or LF there would add headers of the member's (or of
		 * whoever sits on an http:// link) choosing. */
		rc = tsec__seterr(err, TSEC_EPROTO, base, "etcd at %s sent a login token with bytes "
				  "outside a token's alphabet (RFC 6750): refused", base);
	else if (status != 200)
		rc = tsec__seterr(err, TSEC_EDENIED, base, "etcd at %s refused user '%s' "
				  "(HTTP %ld)", base, c->user, status);
	pthread_mutex_lock(&c->mu);
	if (!rc && c->token_gen == seen_gen) {
		snprintf(c->token, sizeof(c->token), "%s", tok);
		c->token_gen++;
	}
	pthread_mutex_unlock(&c->mu);
	json_decref(j);
	return rc;
}

uint64_t tsec__etcd_conn_requests(struct tsec__etcd_conn *c)
{
	return atomic_load(&c->requests);
}

uint64_t tsec__etcd_conn_scanned(struct tsec__etcd_conn *c)
{
	return atomic_load(&c->scanned);
}

/* One etcd call's request and what its answer may be. */
struct post {
	const char *path, *body;
	int retry;
	size_t max;                  /* the most its answer can need */
	int64_t deadline;
	long per;                    /* one member's share of the budget */
};

/*
 * One pass over the members, from the one that answered last: 1 when the
 * call is decided (*rc its result: 0, or the error said), 0 when no
 * member answered (err the last one's failure), -1 when the deadline
 * passed.
 */
static int post_round(struct tsec__etcd_conn *c, CURL *h, const struct post *p, json_t **resp,
		      int *rc, struct tsec_error *err)
{
	unsigned first = atomic_load(&c->cur);
	bool reauthed = false;
	int code = TSEC_EIO;

	for (size_t i = 0; i < c->nep; i++) {
		size_t ep = (first + i) % c->nep;
		int64_t left = p->deadline - tsec__mono_ms();
		enum outcome oc;

		if (left <= 0)
			return -1;
		/* Each member gets its share of the budget, so that one that
		 * hangs does not take all of it. */
		oc = attempt(c, h, ep, p->path, p->body, (long)(left < p->per ? left : p->per),
			     p->retry != TSEC__ETCD_IDEMPOTENT, p->max, resp, &code, err);
		if (oc == REAUTH && !reauthed) {
			reauthed = true;
			i--;                 /* the same endpoint, with a new token */
			continue;
		}
		if (oc == OK) {
			if (ep != first)
				atomic_store(&c->cur, (unsigned)ep);
			*rc = 0;
			return 1;
		}
		if (oc == UNKNOWN && p->retry != TSEC__ETCD_IDEMPOTENT) {
			/* Never sent again: a peer may have written since, and
			 * a second copy would undo its write. */
			char was[TSEC_ERR_MSG];

			snprintf(was, sizeof(was), "%s", err ? err->msg : "no answer");
			*rc = tsec__seterr(err, TSEC_EUNKNOWN, c->ep[ep], "%.200s (the request may "
					   "or may not have been applied)", was);
			atomic_store(&c->cur, (unsigned)((ep + 1) % c->nep));
			return 1;
		}
		if (oc == FAILED) {
			*rc = code;
			return 1;
		}
		/* Not answered here: start the next calls elsewhere. */
		if (ep == atomic_load(&c->cur))
			atomic_store(&c->cur, (unsigned)((ep + 1) % c->nep));
	}
	return 0;
}

int tsec__etcd_post(struct tsec__etcd_conn *c, const char *path, json_t *req, int retry,
		    size_t values, size_t keys, json_t **resp, struct tsec_error *err)
{
	/* A key-value in an answer: its key and value in base64 with the
	 * JSON around them (revisions, lease). */
	size_t key64 = (2 * TSEC_KEY_MAX + 10) / 3 * 4, val64 = (c->request_max + 2) / 3 * 4;
	struct post p = { .path = path, .retry = retry,
			  .max = ((size_t)64 << 10) + values * (key64 + val64 + 512) +
				 keys * (key64 + 512) };
	long backoff = 5;
	int64_t left;
	char *body;
	size_t len;
	int rc = TSEC_EIO, r;
	CURL *h;

	*resp = NULL;
	body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body)
		return tsec__seterr(err, TSEC_ENOMEM, "", "cannot build an etcd request");
	if ((len = strlen(body)) > c->request_max) {
		free(body);
		return tsec__seterr(err, TSEC_ETOOBIG, path, "an etcd request of %zu bytes is over "
				    "request_max (%zu)", len, c->request_max);
	}
	if (!(h = tsec__http_take(&c->pool))) {
		free(body);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	p.body = body;
	p.deadline = tsec__mono_ms() + c->timeout_ms;
	p.per = c->nep > 1 ? (long)c->timeout_ms / (long)c->nep : (long)c->timeout_ms;
	if (p.per < ATTEMPT_MIN_MS)
		p.per = ATTEMPT_MIN_MS;
	/* Until a member decides, or the deadline (err: the last member's
	 * failure, rc TSEC_EIO). */
	while ((r = post_round(c, h, &p, resp, &rc, err)) == 0 &&
	       (left = p.deadline - tsec__mono_ms()) > 0) {
		tsec__nap_ms(backoff < left ? backoff : (long)left);
		backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
	}
	if (r != 1)
		rc = TSEC_EIO;
	free(body);
	tsec__http_give(&c->pool, h);
	return rc;
}

/* ---- watch ---- */

/*
 * One JSON object per line.  What is kept between chunks is a line's
 * start, without its newline: only the new bytes are looked at (issue
 * 52, item 4: the whole partial line was scanned again with each chunk,
 * 4.5 times the CPU a byte).  A line is bounded by the body's max
 * (TSEC__ETCD_LINE_MAX): past it the stream ends, and the feed starts again.
 */
size_t tsec__etcd_stream_take(char *d, size_t sz, size_t nm, void *ud)
{
	struct tsec__etcd_stream *w = ud;
	size_t n = sz * nm, start = 0, from = w->b.n;

	if (tsec__http_on_body(d, sz, nm, &w->b) != n)
		return 0;
	atomic_fetch_add(w->scanned, w->b.n - from);
	for (size_t i = from; i < w->b.n; i++) {
		json_t *j;

		if (w->b.p[i] != '\n')
			continue;
		j = json_loadb(w->b.p + start, i - start, 0, NULL);
		start = i + 1;
		if (!j)
			continue;
		if (w->fn(w->ctx, json_object_get(j, "result") ? json_object_get(j, "result") : j))
			w->stopped = 1;
		json_decref(j);
		if (w->stopped)
			return 0;
	}
	memmove(w->b.p, w->b.p + start, w->b.n - start);
	w->b.n -= start;
	return n;
}

void tsec__etcd_watch_kick(struct tsec__etcd_conn *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->watch) {
		atomic_store(&c->watch_kick, 1);
		curl_multi_wakeup(c->watch);
	}
	pthread_mutex_unlock(&c->mu);
}

void tsec__etcd_watch_stop(struct tsec__etcd_conn *c)
{
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->watch_stop, 1);
	if (c->watch)
		curl_multi_wakeup(c->watch);
	pthread_mutex_unlock(&c->mu);
}

/* The watch's create_request as text (NULL: out of memory). */
static char *watch_body(const char *key, size_t klen, const char *range_end, size_t relen,
			int64_t start_rev)
{
	json_t *cr = json_object(), *req = json_object();
	char *body;

	json_object_set_new(cr, "key", tsec__b64(key, klen));
	json_object_set_new(cr, "range_end", tsec__b64(range_end, relen));
	if (start_rev > 0)
		json_object_set_new(cr, "start_revision", tsec__jnum(start_rev));
	json_object_set_new(req, "create_request", cr);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	return body;
}

/* Why a watch that was not stopped ended, into err (the transfer's own
 * error when it had one); the next watch tries the next endpoint. */
static int watch_ended(struct tsec__etcd_conn *c, CURLM *m, size_t ep, bool kicked,
		       struct tsec_error *err)
{
	int rc = tsec__seterr(err, TSEC_EIO, c->ep[ep], kicked ? "the watch at %s was ended: "
			      "no heartbeat came back through it" : "the watch at %s ended",
			      c->ep[ep]);
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(m, &left)))
		if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
			tsec__seterr(err, TSEC_EIO, c->ep[ep], "the watch at %s ended: %s",
				     c->ep[ep], curl_easy_strerror(msg->data.result));
	atomic_compare_exchange_strong(&c->cur, &(unsigned){ (unsigned)ep },
				       (unsigned)((ep + 1) % c->nep));
	return rc;
}

int tsec__etcd_watch(struct tsec__etcd_conn *c, const char *key, size_t klen,
		     const char *range_end, size_t relen, int64_t start_rev,
		     tsec__etcd_event_fn fn, void *ctx, struct tsec_error *err)
{
	struct tsec__etcd_stream w = { .b = { .max = TSEC__ETCD_LINE_MAX }, .fn = fn,
				       .ctx = ctx, .scanned = &c->scanned };
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	char url[512], *body = watch_body(key, klen, range_end, relen, start_rev);
	bool kicked;
	size_t ep = atomic_load(&c->cur) % c->nep;
	CURLM *m = curl_multi_init();
	CURL *h = curl_easy_init();     /* its own: a watch holds it for long */
	int running = 1, rc = 0;

	if (!m || !h || !hdr || !body) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	if (c->auth && (rc = auth_header(c, h, ep, (long)c->timeout_ms, &hdr, &(unsigned){ 0 },
					 err)))
		goto out;
	snprintf(url, sizeof(url), "%s/v3/watch", c->ep[ep]);
	setup(c, h, url, body, NULL, hdr, &w.b, 0);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, tsec__etcd_stream_take);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
	/* A dead member must not hold a watch forever: TCP keepalive. */
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 2L);
	/* A member that loses its leader cancels the watch rather than
	 * serve it from a partition (etcd's require-leader, as metadata
	 * through the gateway). */
	hdr = curl_slist_append(hdr, "Grpc-Metadata-hasleader: true");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_multi_add_handle(m, h);
	pthread_mutex_lock(&c->mu);
	c->watch = m;
	atomic_store(&c->watch_kick, 0);
	pthread_mutex_unlock(&c->mu);
	while (running && !atomic_load(&c->watch_stop) && !w.stopped &&
	       !atomic_load(&c->watch_kick)) {
		if (curl_multi_perform(m, &running) != CURLM_OK)
			break;
		if (running)
			curl_multi_poll(m, NULL, 0, 1000, NULL);
	}
	pthread_mutex_lock(&c->mu);
	c->watch = NULL;
	kicked = atomic_exchange(&c->watch_kick, 0);
	pthread_mutex_unlock(&c->mu);
	if (!atomic_load(&c->watch_stop) && !w.stopped)
		rc = watch_ended(c, m, ep, kicked, err);
	curl_multi_remove_handle(m, h);
out:
	if (h)
		curl_easy_cleanup(h);
	if (m)
		curl_multi_cleanup(m);
	curl_slist_free_all(hdr);
	free(body);
	free(w.b.p);
	return rc;
}
