/*
 * libFuzzer: what an object store answers (issue 52, item 8).  The input,
 * split at NUL bytes, is the pages of one listing as a server might send
 * them (each a 200's body); they are read in turn until the listing ends
 * or is refused.  Every name handed on must be a blob name with its
 * prefix taken off, and every error's message printable.  Each page is
 * also read as an error body and as the claim object.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/blobs_s3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int named(void *ctx, const char *name, int64_t mtime_ms)
{
	(void)ctx;
	if (!tsec__blob_name_ok(name) || mtime_ms < 0)
		abort();
	return 0;
}

static void printable(const struct tsec_error *err)
{
	for (const char *p = err->msg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec__s3_listing l;
	struct tsec_error err = { 0 };
	char token[1024];
	size_t o = 0;
	int rc = 0;

	tsec__s3_listing_start(&l, "p/");
	while (o <= size) {
		const uint8_t *nul = memchr(data + o, 0, size - o);
		size_t n = nul ? (size_t)(nul - (data + o)) : size - o;

		if (!rc) {
			rc = tsec__s3_list_page(&l, (const char *)data + o, n, named, NULL, token,
						sizeof(token), &err);
			if (rc)
				printable(&err);
			else if (!*token)
				rc = 1;      /* the listing ended: no more pages asked */
		}
		if (tsec__s3_http_error(500, "(fuzz)", data + o, n, &err) == 0)
			abort();
		printable(&err);
		(void)tsec__s3_an_id(data + o, n, NULL);
		o += n + 1;
	}
	tsec__s3_listing_end(&l);
	return 0;
}
