/*
 * libFuzzer: certificate PEM in the C certificate cache, any bytes a
 * store's certificate key may hold (the cache follows shared storage).
 * The input is inserted twice (the same certificate, kept once), names
 * looked up as given and under a wildcard; nothing may crash or leak,
 * and nothing is found in a cache nothing went into.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/certcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Before every seed's notAfter: what goes in is live. */
static int64_t fixed_now(void)
{
	return 1700000000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "a.example", "x.a.example", "example", "*", "" };
	struct tsec_certcache *c = NULL;
	struct tsec_cert_match m;
	struct tsec_error err;
	int rc;

	if (tsec_certcache_new(&c, 8, NULL))
		return 0;
	tsec_certcache_set_clock(c, fixed_now);
	rc = tsec_certcache_insert(c, (const char *)data, size, NULL, &err);
	if (rc == 0)
		tsec_certcache_insert(c, (const char *)data, size, NULL, &err);
	if (tsec_certcache_count(c) > 1)
		abort();                 /* one certificate, kept once */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		unsigned t = tsec_certcache_read_begin(c);

		if (tsec_certcache_lookup(c, names[i], &m) == 0 && rc != 0)
			abort();             /* found in an empty cache */
		tsec_certcache_read_end(c, t);
	}
	tsec_certcache_free(&c);
	return 0;
}
