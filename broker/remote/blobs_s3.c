/*
 * Blobs in an S3-compatible object store, over libcurl: its AWS
 * Signature V4 (CURLOPT_AWS_SIGV4) signs every request, with the
 * payload's SHA-256 in x-amz-content-sha256; TLS as curl does it
 * (verified, CA bundle settable); path-style (host/bucket/key) or
 * virtual-host (bucket.host/key) addressing.
 *
 * "Only if absent" is a HEAD, then a PUT with If-None-Match: * (S3 and
 * most compatibles refuse it with 412 when the name is taken).  On a
 * server that ignores the header, two writers racing past the HEAD write
 * the same bytes: a blob's bytes follow from its name (remote.c seals
 * with a nonce derived from the content), so neither changes what the
 * other wrote.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <sodium.h>

#include "broker/remote/blobs.h"
#include "broker/remote/blobs_s3.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/http.h"
#include "common/secret.h"

struct s3blobs {
	struct tsec__blobs base;
	char base_url[512];          /* ".../bucket/" or "https://bucket.host/" */
	char prefix[256];            /* "" or "p/q/" */
	char sigv4[96];
	char access[128];
	char secret[256];
	char ca[512];
	long timeout_ms;
	int page_keys;               /* max-keys of a listing; 0: the server's */
	struct tsec__http_pool pool;
};

void tsec__blobs_s3_page_keys(struct tsec__blobs *b, int n)
{
	((struct s3blobs *)b)->page_keys = n;
}

struct upload {
	const uint8_t *p;
	size_t n, off;
};

static size_t on_read(char *d, size_t sz, size_t nm, void *ud)
{
	struct upload *u = ud;
	size_t n = sz * nm;

	if (n > u->n - u->off)
		n = u->n - u->off;
	memcpy(d, u->p + u->off, n);
	u->off += n;
	return n;
}

enum method { M_GET, M_HEAD, M_PUT, M_DELETE };

/*
 * One signed request for path (below the base URL, query included): the
 * HTTP status, or a TSEC_E* code (< 0) with err filled when no answer
 * came.  The body (at most max bytes) into *out when out is given.
 */
static long request_once(struct s3blobs *s, enum method m, const char *path, const void *data,
			 size_t len, const char *extra_header, size_t max, struct tsec__http_body *out,
			 struct tsec_error *err)
{
	char url[1024], hdr_sha[128];
	uint8_t sha[crypto_hash_sha256_BYTES];
	struct curl_slist *h = NULL;
	struct upload up = { data, len, 0 };
	/* A request that wants no body may still get an error document: it
	 * is read (so the status comes back, not curl's write error) and
	 * dropped. */
	struct tsec__http_body sink = { .max = 65536 };
	CURL *c = tsec__http_take(&s->pool);
	CURLcode cc;
	long status = 0;

	if (!c)
		return tsec__seterr(err, TSEC_ENOMEM, "", "cannot start a request");
	snprintf(url, sizeof(url), "%s%s", s->base_url, path);
	crypto_hash_sha256(sha, data ? data : (const void *)"", data ? len : 0);
	memcpy(hdr_sha, "x-amz-content-sha256: ", 22);
	sodium_bin2hex(hdr_sha + 22, sizeof(hdr_sha) - 22, sha, sizeof(sha));
	h = curl_slist_append(h, hdr_sha);
	if (extra_header)
		h = curl_slist_append(h, extra_header);
	/*
	 * No "Expect:" line to turn curl's 100-continue off: curl 7.88
	 * signs every header it is given, an empty one too, and then sends
	 * none, so S3 computes another signature and refuses every request
	 * (tests/sigv4.c checks each signed header is sent).  curl asks
	 * for 100-continue only for bodies over 1 MiB, which no blob
	 * reaches but by its header (blob_max is 1 MiB by default).
	 */
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(c, CURLOPT_USERNAME, s->access);
	curl_easy_setopt(c, CURLOPT_PASSWORD, s->secret);
	tsec__http_defaults(c, s->timeout_ms, 0, s->ca);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, tsec__http_on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out ? out : &sink);
	if (out)
		out->max = max;
	switch (m) {
	case M_HEAD:
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		break;
	case M_PUT:
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, &up);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
		break;
	case M_DELETE:
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
		break;
	case M_GET:
		break;
	}
	cc = curl_easy_perform(c);
	curl_slist_free_all(h);
	free(sink.p);
	if (cc == CURLE_WRITE_ERROR && out && out->over) {
		tsec__http_give(&s->pool, c);
		return tsec__seterr(err, TSEC_ETOOBIG, path, "the object store's answer for %s is "
				    "over %zu bytes", path, max);
	}
	if (cc != CURLE_OK) {
		tsec__http_give(&s->pool, c);
		return tsec__seterr(err, cc == CURLE_OPERATION_TIMEDOUT ? TSEC_ETIMEDOUT : TSEC_EIO,
				    path, "object store: %s", curl_easy_strerror(cc));
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	tsec__http_give(&s->pool, c);
	return status;
}

/*
 * request_once, again after a pause while the store answers as S3 does
 * when it is busy or failed inside (500 InternalError, 503 SlowDown, and
 * a gateway's 502 and 504), at most S3_TRIES times in all: S3 asks its
 * clients to retry those.  Every request here may be sent twice: GET,
 * HEAD and DELETE change nothing more the second time, and a blob's
 * bytes follow from its name, so a PUT sent again writes the same bytes
 * (or, with If-None-Match, meets its own first write and answers 412,
 * which put_new reads as "exists").  A test's virtual clock makes the
 * pause a step of that clock (tsec__nap_ms).
 */
#define S3_TRIES 4
#define S3_PAUSE_MS 20

static bool transient(long status)
{
	return status == 500 || status == 502 || status == 503 || status == 504;
}

static long request(struct s3blobs *s, enum method m, const char *path, const void *data,
		    size_t len, const char *extra_header, size_t max, struct tsec__http_body *out,
		    struct tsec_error *err)
{
	for (int attempt = 1;; attempt++) {
		long st = request_once(s, m, path, data, len, extra_header, max, out, err);
		if (!transient(st) || attempt == S3_TRIES)
			return st;
		if (out) {
			free(out->p);
			memset(out, 0, sizeof(*out));
		}
		/* 20, 40, 80 ms, each with up to as much again at random. */
		tsec__nap_ms(((int64_t)S3_PAUSE_MS << (attempt - 1)) +
			     (int64_t)randombytes_uniform((uint32_t)S3_PAUSE_MS << (attempt - 1)));
	}
}

/* The object's path for blob name (below the base URL), or TSEC_EKEY. */
static int object_path(const struct s3blobs *s, const char *name, char *path, size_t n,
		       struct tsec_error *err)
{
	if (!tsec__blob_name_ok(name))
		return tsec__seterr(err, TSEC_EKEY, "", "not a blob name");
	snprintf(path, n, "%s%s", s->prefix, name);
	return 0;
}

static int s_put_new(struct tsec__blobs *b, const char *name, const void *data, size_t len,
		     struct tsec_error *err)
{
	struct s3blobs *s = (struct s3blobs *)b;
	char path[400];
	struct tsec__http_body rb = { 0 };
	long st;
	int rc;

	if ((rc = object_path(s, name, path, sizeof(path), err)))
		return rc;
	st = request(s, M_HEAD, path, NULL, 0, NULL, 65536, &rb, err);
	free(rb.p);
	memset(&rb, 0, sizeof(rb));
	if (st < 0)
		return (int)st;
	if (st == 200)
		return tsec__seterr(err, TSEC_EEXIST, name, "blob %s exists", name);
	if (st != 404)
		return tsec__s3_http_error(st, name, NULL, 0, err);
	st = request(s, M_PUT, path, data, len, "If-None-Match: *", 65536, &rb, err);
	if (st == 501) {
		/* A server without conditional writes: the HEAD above found
		 * no blob, and a racing writer of this name writes these same
		 * bytes (see the top of this file). */
		free(rb.p);
		memset(&rb, 0, sizeof(rb));
		st = request(s, M_PUT, path, data, len, NULL, 65536, &rb, err);
	}
	if (st < 0) {
		free(rb.p);
		return (int)st;
	}
	if (st == 412 || st == 409) {
		free(rb.p);
		return tsec__seterr(err, TSEC_EEXIST, name, "blob %s exists", name);
	}
	if (st != 200) {
		rc = tsec__s3_http_error(st, name, rb.p, rb.n, err);
		free(rb.p);
		return rc;
	}
	free(rb.p);
	return 0;
}

/* A request without a body (HEAD, DELETE) on blob name: its HTTP status,
 * or a negative code with err set; an error document into *eb. */
static long bodiless(struct s3blobs *s, enum method method, const char *name, struct tsec__http_body *eb,
		     struct tsec_error *err)
{
	char path[400];
	int rc;

	if ((rc = object_path(s, name, path, sizeof(path), err)))
		return rc;
	return request(s, method, path, NULL, 0, NULL, 65536, eb, err);
}

static int s_has(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	struct tsec__http_body eb = { 0 };
	long st = bodiless((struct s3blobs *)b, M_HEAD, name, &eb, err);
	int rc;

	if (st < 0)
		rc = (int)st;
	else if (st == 200)
		rc = 0;
	else if (st == 404)
		rc = tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name);
	else
		rc = tsec__s3_http_error(st, name, eb.p, eb.n, err);
	free(eb.p);
	return rc;
}

static int s_get(struct tsec__blobs *b, const char *name, size_t max, uint8_t **out,
		 size_t *len, struct tsec_error *err)
{
	struct s3blobs *s = (struct s3blobs *)b;
	char path[400];
	struct tsec__http_body rb = { 0 };
	long st;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = object_path(s, name, path, sizeof(path), err)))
		return rc;
	/* An error document may be longer than a small blob. */
	st = request(s, M_GET, path, NULL, 0, NULL, max < 65536 ? 65536 : max, &rb, err);
	if (st < 0) {
		free(rb.p);
		return (int)st;
	}
	if (st == 404) {
		free(rb.p);
		return tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name);
	}
	if (st != 200) {
		rc = tsec__s3_http_error(st, name, rb.p, rb.n, err);
		free(rb.p);
		return rc;
	}
	if (rb.n > max) {
		free(rb.p);
		return tsec__seterr(err, TSEC_ETOOBIG, name, "blob %s is too large", name);
	}
	if (!rb.p && !(rb.p = calloc(1, 1)))
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	*out = (uint8_t *)rb.p;
	*len = rb.n;
	return 0;
}

static int s_del(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	struct tsec__http_body eb = { 0 };
	long st = bodiless((struct s3blobs *)b, M_DELETE, name, &eb, err);
	int rc;

	if (st < 0)
		rc = (int)st;
	else if (st == 200 || st == 204 || st == 404)
		rc = 0;
	else
		rc = tsec__s3_http_error(st, name, eb.p, eb.n, err);
	free(eb.p);
	return rc;
}

static int s_list(struct tsec__blobs *b, tsec__blob_list_fn fn, void *ctx,
		  struct tsec_error *err)
{
	struct s3blobs *s = (struct s3blobs *)b;
	char token[1024] = "";
	struct tsec__s3_listing l;
	int rc = 0;

	tsec__s3_listing_start(&l, s->prefix);
	do {
		char path[2048], *esc_prefix, *esc_token = NULL;
		struct tsec__http_body rb = { 0 };
		long st;

		esc_prefix = curl_easy_escape(NULL, s->prefix, 0);
		if (*token)
			esc_token = curl_easy_escape(NULL, token, 0);
		/* The parameters in the order SigV4's canonical query sorts
		 * them, whatever the signer does with an unsorted one. */
		{
			char keys[32] = "";

			if (s->page_keys)
				snprintf(keys, sizeof(keys), "&max-keys=%d", s->page_keys);
			snprintf(path, sizeof(path), "?%s%s%slist-type=2%s&prefix=%s",
				 esc_token ? "continuation-token=" : "", esc_token ? esc_token : "",
				 esc_token ? "&" : "", keys, esc_prefix ? esc_prefix : "");
		}
		curl_free(esc_prefix);
		curl_free(esc_token);
		st = request(s, M_GET, path, NULL, 0, NULL, TSEC__S3_LIST_BODY_MAX, &rb, err);
		if (st < 0 || st != 200)
			rc = st < 0 ? (int)st : tsec__s3_http_error(st, "(list)", rb.p, rb.n, err);
		else
			rc = tsec__s3_list_page(&l, rb.p ? (const char *)rb.p : "", rb.n, fn, ctx,
						token, sizeof(token), err);
		free(rb.p);
	} while (rc == 0 && *token);
	tsec__s3_listing_end(&l);
	return rc;
}

static void s_close(struct tsec__blobs *b)
{
	struct s3blobs *s = (struct s3blobs *)b;

	tsec__http_pool_destroy(&s->pool);
	sodium_memzero(s->secret, sizeof(s->secret));
	free(s);
}

/* A listing of at most one name under the prefix: the bucket is there
 * and takes our credentials. */
static int s_probe(struct tsec__blobs *b, struct tsec_error *err)
{
	struct s3blobs *s = (struct s3blobs *)b;
	char path[1024], *esc = curl_easy_escape(NULL, s->prefix, 0);
	struct tsec__http_body rb = { 0 };
	long st;
	int rc = 0;

	snprintf(path, sizeof(path), "?list-type=2&max-keys=1&prefix=%s", esc ? esc : "");
	curl_free(esc);
	st = request(s, M_GET, path, NULL, 0, NULL, 65536, &rb, err);
	if (st < 0)
		rc = (int)st;
	else if (st != 200)
		rc = tsec__s3_http_error(st, "the bucket", rb.p, rb.n, err);
	free(rb.p);
	return rc;
}

#define CLAIM_OBJECT ".tsec-claim"

/*
 * The claim is the object <prefix>.tsec-claim, written only where
 * absent (If-None-Match), then read.  A read may find it empty or part
 * written while a racing first writer finishes it (s3rver does, issue 48:
 * taken for another coordinator's, "store id ;..."): read again, a few
 * times over about two seconds, until it holds a store id.
 */
static int s_claim(struct tsec__blobs *b, const char *id, char *holder, size_t n,
		   struct tsec_error *err)
{
	struct s3blobs *s = (struct s3blobs *)b;
	char path[400];
	struct tsec__http_body rb = { 0 };
	long st;
	int rc = 0;

	snprintf(path, sizeof(path), "%s" CLAIM_OBJECT, s->prefix);
	st = request(s, M_HEAD, path, NULL, 0, NULL, 65536, &rb, err);
	free(rb.p);
	memset(&rb, 0, sizeof(rb));
	if (st == 404 && !id) {
		*holder = '\0';
		return 0;
	}
	if (st == 404) {
		st = request(s, M_PUT, path, id, strlen(id), "If-None-Match: *", 65536, &rb, err);
		if (st == 501) {
			free(rb.p);
			memset(&rb, 0, sizeof(rb));
			st = request(s, M_PUT, path, id, strlen(id), NULL, 65536, &rb, err);
		}
		free(rb.p);
		memset(&rb, 0, sizeof(rb));
		if (st >= 0 && st != 200 && st != 412 && st != 409)
			return tsec__s3_http_error(st, CLAIM_OBJECT, NULL, 0, err);
	}
	if (st < 0)
		return (int)st;
	for (int tries = 0;; tries++) {
		st = request(s, M_GET, path, NULL, 0, NULL, 4096, &rb, err);
		if (st < 0) {
			rc = (int)st;
		} else if (st != 200) {
			rc = tsec__s3_http_error(st, CLAIM_OBJECT, rb.p, rb.n, err);
		} else if (tsec__s3_an_id(rb.p, rb.n, id)) {
			snprintf(holder, n, "%.*s", (int)rb.n, (const char *)rb.p);
		} else if (tries < 10) {
			free(rb.p);
			memset(&rb, 0, sizeof(rb));
			tsec__nap_ms(tries < 5 ? 10 << tries : 250);
			continue;
		} else {
			rc = tsec__seterr(err, TSEC_ECORRUPT, CLAIM_OBJECT, "%s%s holds no store id "
					  "(%zu bytes, read 11 times over 1.5 s): not this store's "
					  "claim, nor one being written", s->prefix, CLAIM_OBJECT, rb.n);
		}
		break;
	}
	free(rb.p);
	return rc;
}

static const struct tsec__blob_ops s3_ops = {
	"s3", s_put_new, s_has, s_get, s_del, s_list, s_close, s_probe, s_claim, NULL,
};

static bool plain_text(const char *v, const char *extra)
{
	for (; v && *v; v++)
		if (!isalnum((unsigned char)*v) && !strchr(extra, *v))
			return false;
	return true;
}

static bool bucket_ok(const char *b)
{
	size_t n = strlen(b);

	if (!isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]) || strstr(b, ".."))
		return false;
	for (; *b; b++)
		if (!(islower((unsigned char)*b) || isdigit((unsigned char)*b) || *b == '.' ||
		      *b == '-'))
			return false;
	return true;
}

static bool prefix_ok(const char *p)
{
	if (!plain_text(p, "-._/"))
		return false;
	while (*p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		/* One trailing '/' closes the prefix; any other empty
		 * segment is refused. */
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!e)
			break;
		p = e + 1;
	}
	return true;
}

/*
 * "bucket[/prefix]" read and checked: the bucket as S3 allows names (and
 * so safe in a host name: 3-63 of lower-case letters, digits, '.' and
 * '-', a letter or digit at each end, no ".."), the prefix plain
 * segments (a request's path is the bucket and the prefix as written,
 * and ".." there is another bucket).  *prefix: NULL or after the slash.
 */
static int where_of(const char *where, char bucket[64], const char **prefix,
		    struct tsec_error *err)
{
	const char *slash = strchr(where, '/');
	size_t bl = slash ? (size_t)(slash - where) : strlen(where);

	if (bl < 3 || bl >= 64)
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "s3: the bucket name must be 3 "
				    "to 63 characters");
	memcpy(bucket, where, bl);
	bucket[bl] = 0;
	if (!bucket_ok(bucket))
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "s3: bucket '%s' is not a valid "
				    "name (lower-case letters, digits, '.' and '-', a letter or "
				    "digit at each end)", bucket);
	if (slash && !prefix_ok(slash + 1))
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "s3: the prefix '%.80s' must be "
				    "segments of letters, digits and - . _ separated by single "
				    "'/', none of them '.' or '..'", slash + 1);
	*prefix = slash ? slash + 1 : NULL;
	return 0;
}

/* The URL every request starts from: AWS's for the region, or the
 * endpoint given; the bucket in the path, or in the host name. */
static int base_url_of(struct s3blobs *s, const char *ep, const char *bucket,
		       const char *region, bool vhost, struct tsec_error *err)
{
	const char *host;
	size_t el;

	if (!ep || !*ep) {
		if (vhost)
			snprintf(s->base_url, sizeof(s->base_url), "https://%s.s3.%s.amazonaws.com/",
				 bucket, region);
		else
			snprintf(s->base_url, sizeof(s->base_url), "https://s3.%s.amazonaws.com/%s/",
				 region, bucket);
		return 0;
	}
	host = strstr(ep, "://");
	el = strlen(ep);
	if (!host || (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8)))
		return tsec__seterr(err, TSEC_EINVAL, "s3_endpoint", "s3_endpoint must be "
				    "http://host[:port] or https://host[:port]");
	if (vhost)
		snprintf(s->base_url, sizeof(s->base_url), "%.*s%s.%.*s/", (int)(host + 3 - ep), ep,
			 bucket, (int)(el - (size_t)(host + 3 - ep)) - (ep[el - 1] == '/'),
			 host + 3);
	else
		snprintf(s->base_url, sizeof(s->base_url), "%.*s/%s/", (int)el - (ep[el - 1] == '/'),
			 ep, bucket);
	return 0;
}

int tsec__blobs_s3_open(struct tsec__blobs **out, const char *where,
			const struct tsec_remote_opts *o, struct tsec_error *err)
{
	struct s3blobs *s;
	char bucket[64];
	const char *prefix = NULL, *region = o->s3_region;
	int rc;

	*out = NULL;
	if ((rc = tsec__http_global(err)) || (rc = where_of(where, bucket, &prefix, err)))
		return rc;
	if (!region || !*region)
		region = "us-east-1";
	if (!plain_text(region, "-"))
		return tsec__seterr(err, TSEC_EINVAL, "s3_region", "s3: bad region");
	if (!o->s3_access_key || !*o->s3_access_key || !plain_text(o->s3_access_key, "-_"))
		return tsec__seterr(err, TSEC_EINVAL, "s3_access_key", "s3: needs s3_access_key");
	if (!(s = calloc(1, sizeof(*s))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	s->base.ops = &s3_ops;
	tsec__http_pool_init(&s->pool);
	s->timeout_ms = o->timeout_ms ? (long)o->timeout_ms : 10000;
	snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", region);
	snprintf(s->access, sizeof(s->access), "%s", o->s3_access_key);
	if (o->s3_ca_file)
		snprintf(s->ca, sizeof(s->ca), "%s", o->s3_ca_file);
	if (prefix && *prefix) {
		size_t pl = strlen(prefix);

		snprintf(s->prefix, sizeof(s->prefix), "%s%s", prefix,
			 prefix[pl - 1] == '/' ? "" : "/");
	}
	if ((rc = tsec__password_load(o->s3_secret_file, s->secret, sizeof(s->secret), err)) ||
	    (rc = base_url_of(s, o->s3_endpoint, bucket, region, o->s3_virtual_host, err))) {
		s_close(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}
