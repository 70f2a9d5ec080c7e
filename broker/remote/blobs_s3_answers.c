/*
 * Reading what an S3-compatible object store answers (blobs_s3.h): one
 * listing page at a time, with the bounds a listing keeps across its
 * pages; an error body's <Code>; the claim object's store id.  Nothing
 * here trusts the server: a body is read within its length, tags are
 * found by search (no XML parser: a listing's few fields are plain text
 * between tags, and a name that does not pass tsec__blob_name_ok is left
 * out), and whatever does not read as S3 writes it is an error.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/remote/blobs_s3.h"
#include "common/clock.h"
#include "common/error.h"

/* The text between <tag> and </tag> from *p on, into out; advances *p. */
static int xml_take(const char **p, const char *end, const char *tag, char *out, size_t n)
{
	char open[40], close[40];
	const char *a, *z;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	if (!(a = memmem(*p, (size_t)(end - *p), open, strlen(open))))
		return -1;
	a += strlen(open);
	if (!(z = memmem(a, (size_t)(end - a), close, strlen(close))))
		return -1;
	if ((size_t)(z - a) >= n)
		out[0] = 0;
	else {
		memcpy(out, a, (size_t)(z - a));
		out[z - a] = 0;
	}
	*p = z + strlen(close);
	return 0;
}

/*
 * What one listing may hold (issue 49, item 6: a server alternating two
 * continuation tokens was asked 3,810 pages in 60 s while the sweep's
 * memory grew from 116 to 640 MB, bounded only at 100,000 pages, about
 * 16 GB): at most this many pages, this many bytes of names handed on
 * (about a million blobs: each name is also held by the sweep), and no
 * continuation token twice.
 */
#define LIST_PAGES_MAX 100000
#define LIST_BYTES_MAX (64u << 20)

/* 1 when token was seen before in this listing, 0 when added, -1 when
 * out of memory.  The tokens are kept as keyed 64-bit hashes: an open-
 * addressing set that doubles. */
static int token_seen(struct tsec__s3_listing *l, const char *token)
{
	uint64_t h;
	unsigned char out[crypto_shorthash_BYTES];

	if (l->seen_n * 2 >= l->seen_cap) {
		size_t cap = l->seen_cap ? l->seen_cap * 2 : 64;
		uint64_t *nv = calloc(cap, sizeof(*nv));

		if (!nv)
			return -1;
		for (size_t i = 0; i < l->seen_cap; i++)
			if (l->seen[i])
				for (size_t j = l->seen[i] % cap;; j = (j + 1) % cap)
					if (!nv[j]) {
						nv[j] = l->seen[i];
						break;
					}
		free(l->seen);
		l->seen = nv;
		l->seen_cap = cap;
	}
	crypto_shorthash(out, (const unsigned char *)token, strlen(token), l->key);
	memcpy(&h, out, sizeof(h));
	h |= 1;                      /* 0 marks a free slot */
	for (size_t j = h % l->seen_cap;; j = (j + 1) % l->seen_cap) {
		if (l->seen[j] == h)
			return 1;
		if (!l->seen[j]) {
			l->seen[j] = h;
			l->seen_n++;
			return 0;
		}
	}
}

/* The names of one page (p..end) handed to fn; their bytes added to
 * *bytes.  1 for an entry without its Key or LastModified. */
static int list_names(const char *prefix, const char *p, const char *end,
		      tsec__blob_list_fn fn, void *ctx, size_t *bytes)
{
	int rc = 0;

	while (rc == 0) {
		char key[512], lm[64], day[32];
		const char *c = memmem(p, (size_t)(end - p), "<Contents>", 10);
		int64_t secs;

		if (!c)
			break;
		p = c + 10;
		if (xml_take(&p, end, "Key", key, sizeof(key)) ||
		    xml_take(&p, end, "LastModified", lm, sizeof(lm)))
			return 1;
		if (strncmp(key, prefix, strlen(prefix)) ||
		    !tsec__blob_name_ok(key + strlen(prefix)))
			continue;
		*bytes += strlen(key);
		/* "2026-12-02T03:26:12.000Z": seconds, fraction dropped. */
		snprintf(day, sizeof(day), "%.19sZ", lm);
		secs = tsec__utc_parse(day);
		rc = fn(ctx, key + strlen(prefix), secs < 0 ? 0 : secs * 1000);
	}
	return rc;
}

/* The page's continuation token into token ("" on the last page); a
 * page that says it is truncated must give one. */
static int next_token(const char *p, const char *end, char *token, size_t cap,
		      struct tsec_error *err)
{
	const char *q = p;
	char trunc[8] = "";

	*token = 0;
	if (xml_take(&q, end, "IsTruncated", trunc, sizeof(trunc)) || strcmp(trunc, "true"))
		return 0;
	q = p;
	xml_take(&q, end, "NextContinuationToken", token, cap);
	if (!*token)
		return tsec__seterr(err, TSEC_EIO, "(list)", "object store: a listing page says "
				    "it is truncated and gives no continuation token; listing "
				    "refused");
	return 0;
}

void tsec__s3_listing_start(struct tsec__s3_listing *l, const char *prefix)
{
	memset(l, 0, sizeof(*l));
	l->prefix = prefix;
	randombytes_buf(l->key, sizeof(l->key));
}

void tsec__s3_listing_end(struct tsec__s3_listing *l)
{
	free(l->seen);
	l->seen = NULL;
}

int tsec__s3_list_page(struct tsec__s3_listing *l, const char *p, size_t n,
		       tsec__blob_list_fn fn, void *ctx, char *token, size_t cap,
		       struct tsec_error *err)
{
	const char *end = p + n;
	int rc;

	*token = 0;
	/* A 200 whose body is no listing is not an empty bucket (issue 52,
	 * item 7: garbage read as "no blobs", and a sweep said it had
	 * swept). */
	if (!memmem(p, n, "<ListBucketResult", 17))
		return tsec__seterr(err, TSEC_EIO, "(list)", "object store: a listing answered "
				    "200 with a body that is no ListBucketResult (%zu bytes); "
				    "listing refused", n);
	if ((rc = next_token(p, end, token, cap, err)))
		return rc;
	if ((rc = list_names(l->prefix, p, end, fn, ctx, &l->bytes)) == 1)
		return tsec__seterr(err, TSEC_EIO, "(list)", "object store: a listing entry "
				    "without its Key or LastModified; listing refused");
	if (rc || !*token)
		return rc;
	/* A token seen before leads where the listing has been: asking
	 * again would go round for ever. */
	switch (token_seen(l, token)) {
	case 1:
		return tsec__seterr(err, TSEC_EIO, "(list)", "object store: the listing's "
				    "continuation token came back after %d pages (seen before "
				    "in this listing): the server goes round in circles; "
				    "listing refused", l->pages + 1);
	case -1:
		return tsec__seterr(err, TSEC_ENOMEM, "(list)", NULL);
	}
	if (++l->pages >= LIST_PAGES_MAX)
		return tsec__seterr(err, TSEC_EIO, "(list)", "object store: the listing's "
				    "continuation never ended (%d pages): listing refused",
				    l->pages);
	if (l->bytes > LIST_BYTES_MAX)
		return tsec__seterr(err, TSEC_EIO, "(list)", "object store: the listing handed "
				    "over more than %u MiB of names in %d pages: listing refused "
				    "(a server that never ends, or a prefix holding more blobs "
				    "than one broker sweeps)", LIST_BYTES_MAX >> 20, l->pages);
	return 0;
}

int tsec__s3_http_error(long status, const char *name, const void *body, size_t n,
			struct tsec_error *err)
{
	char code[64] = "";
	const char *p = body ? memmem(body, n, "<Code>", 6) : NULL;

	if (p) {
		const char *end = (const char *)body + n;
		size_t i = 0;

		for (p += 6; p < end && *p != '<' && i + 1 < sizeof(code); p++)
			code[i++] = isalnum((unsigned char)*p) ? *p : '?';
		code[i] = 0;
	}
	if (status == 403)
		return tsec__seterr(err, TSEC_EAUTH, name, "the object store refused our request "
				    "(HTTP 403%s%s) for %s: check s3_access_key, the secret in "
				    "s3_secret_file and s3_region", *code ? " " : "", code, name);
	return tsec__seterr(err, TSEC_EIO, name, "object store: HTTP %ld%s%s for blob %s", status,
			    *code ? " " : "", code, name);
}

/* Whether body[0..n) is a store id like id: as long, and hex. */
bool tsec__s3_an_id(const void *body, size_t n, const char *id)
{
	const char *p = body;

	if (!p || n != TSEC__STORE_ID_HEX || (id && n != strlen(id)))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return true;
}

