/*
 * Internal: the contract an object-store provider implements for the
 * remote certificate store (remote.c).  A provider stores opaque,
 * immutable blobs under names the store makes ("crt/<64 hex>",
 * "key/<64 hex>", "meta/<64 hex>"; never anything a caller typed) and
 * promises:
 *
 *   put_new   writes a blob only where none is: TSEC_EEXIST when the name
 *             is taken (and nothing changes), 0 once the whole blob is
 *             durable.  A reader never sees part of a blob.
 *   has       0 when the blob is there, TSEC_ENOENT when it is not.
 *   get       the whole blob, at most max bytes (TSEC_ETOOBIG past that),
 *             TSEC_ENOENT when absent.
 *   del       removes one; absent is 0.
 *   list      every blob name with its mtime (unix ms); names that are
 *             not the store's own are skipped, never reported.
 *   probe     0 when the store answers and takes our credentials, else
 *             the error a request would get (TSEC_EAUTH: refused).
 *   claim     claims the store for the coordinator named id (hex), where
 *             no claim is; the claim there, ours or another's, into
 *             holder: a blob store is one coordinator's, or the sweeps
 *             of two would remove each other's live blobs.  With id
 *             NULL only reads it: holder "" where none is.
 *   litter    removes what writers that are gone left (a folder's
 *             temporaries), counting it; NULL where nothing is left.
 *
 * Every call is thread-safe and bounded by the provider's timeout.
 */
#ifndef TSEC_REMOTE_BLOBS_H
#define TSEC_REMOTE_BLOBS_H

#include <stddef.h>
#include <stdint.h>

#include "tinysecurity/remote.h"

/* "crt/" + 64 hex digits: the longest name a blob has. */
#define TSEC__BLOB_NAME_MAX 72
/* A coordinator's id: 32 hex digits. */
#define TSEC__STORE_ID_HEX 32

struct tsec__blobs;

typedef int (*tsec__blob_list_fn)(void *ctx, const char *name, int64_t mtime_ms);

struct tsec__blob_ops {
	const char *name;            /* "file", "s3", "memory" */
	int (*put_new)(struct tsec__blobs *b, const char *name, const void *data, size_t len,
		       struct tsec_error *err);
	int (*has)(struct tsec__blobs *b, const char *name, struct tsec_error *err);
	int (*get)(struct tsec__blobs *b, const char *name, size_t max, uint8_t **out,
		   size_t *len, struct tsec_error *err);
	int (*del)(struct tsec__blobs *b, const char *name, struct tsec_error *err);
	int (*list)(struct tsec__blobs *b, tsec__blob_list_fn fn, void *ctx,
		    struct tsec_error *err);
	void (*close)(struct tsec__blobs *b);
	int (*probe)(struct tsec__blobs *b, struct tsec_error *err);
	int (*claim)(struct tsec__blobs *b, const char *id, char *holder, size_t n,
		     struct tsec_error *err);
	int (*litter)(struct tsec__blobs *b, size_t *removed, struct tsec_error *err);
};

struct tsec__blobs {
	const struct tsec__blob_ops *ops;
};

/* Whether name is one the store makes: kind "/" 64 lower-case hex. */
int tsec__blob_name_ok(const char *name);

/* The providers (remote.c lists them): each opens from what follows its
 * scheme in o->blobs ("file:", "s3://", "memory:"). */
int tsec__blobs_file_open(struct tsec__blobs **out, const char *root,
			  const struct tsec_remote_opts *o, struct tsec_error *err);
int tsec__blobs_memory_open(struct tsec__blobs **out, const char *rest,
			    const struct tsec_remote_opts *o, struct tsec_error *err);
int tsec__blobs_s3_open(struct tsec__blobs **out, const char *bucket_and_prefix,
			const struct tsec_remote_opts *o, struct tsec_error *err);

/* Tests only: the name a folder provider gives its temporaries
 * (".tsec-tmp-<owner>-..."), into out. */
void tsec__blobs_file_owner(struct tsec__blobs *b, char *out, size_t n);

/* Tests only: an S3 provider's listings asked in pages of at most n
 * keys (max-keys; 0: the server's own, 1,000 on S3), so that a test
 * pages a listing without a thousand objects. */
void tsec__blobs_s3_page_keys(struct tsec__blobs *b, int n);

/* The providers' schemes ("file:", "s3://", ...), into out[0..max); how
 * many (for the tests that check each has its variant). */
size_t tsec__blobs_schemes(const char **out, size_t max);

/* Opens the provider o->blobs names. */
int tsec__blobs_open(struct tsec__blobs **out, const struct tsec_remote_opts *o,
		     struct tsec_error *err);

#endif
