/*
 * What an S3-compatible object store answers, read (blobs_s3_answers.c):
 * listing pages, error bodies, the claim object.  Apart from the HTTP
 * in blobs_s3.c so that each reader can be fed any bytes (fuzz_s3):
 * every answer is from a server the broker does not control.
 */
#ifndef TSEC_REMOTE_BLOBS_S3_H
#define TSEC_REMOTE_BLOBS_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#include "broker/remote/blobs.h"

/* The most bytes one listing page may have. */
#define TSEC__S3_LIST_BODY_MAX (4u << 20)

/* One listing across its pages: what it has been given so far. */
struct tsec__s3_listing {
	const char *prefix;          /* "" or "p/q/": names are below it */
	uint64_t *seen;              /* continuation tokens given, as keyed hashes */
	size_t seen_cap, seen_n;
	unsigned char key[crypto_shorthash_KEYBYTES];
	size_t bytes;                /* of names handed on */
	int pages;
};

/* Starts a listing of the names below prefix (kept, not copied). */
void tsec__s3_listing_start(struct tsec__s3_listing *l, const char *prefix);

/*
 * Reads one page, body[0..n) of a 200: hands each name below the prefix
 * (and its LastModified, in ms) to fn, and writes the continuation token
 * into token ("" when the page was the last).  Returns 0, what fn
 * returned when not 0, or TSEC_EIO with err set for a body that is no
 * listing, an entry without its Key or LastModified, a truncated page
 * without a token, a token given before, or a listing past its bounds.
 */
int tsec__s3_list_page(struct tsec__s3_listing *l, const char *body, size_t n,
		       tsec__blob_list_fn fn, void *ctx, char *token, size_t cap,
		       struct tsec_error *err);

/* Frees what the listing holds. */
void tsec__s3_listing_end(struct tsec__s3_listing *l);

/* The error for an answer of status with body[0..n) (its <Code>, made
 * printable), about name: TSEC_EAUTH for 403, else TSEC_EIO. */
int tsec__s3_http_error(long status, const char *name, const void *body, size_t n,
			struct tsec_error *err);

/* Whether body[0..n) is a store id (hex, TSEC__STORE_ID_HEX long), and
 * as long as id when id is given. */
bool tsec__s3_an_id(const void *body, size_t n, const char *id);

#endif
