/*
 * libFuzzer: an etcd watch stream (issue 52, item 8).  The input is the
 * bytes a member streams, handed to the stream reader in chunks whose
 * sizes the first byte picks, each line's answer to the feed's reader
 * of results, over a backend with prefix "tp" and its heartbeat key.
 * Lines are bounded at 4 KiB here (96 MiB in the broker) so the bound
 * is reached.  Nothing may crash or leak; every key handed to the
 * subscriber lies below the prefix's "/k/", and a line past the bound
 * ends the stream.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/etcd/etcd_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINE 4096

static struct etcd *e;

static void changed(void *ctx, const char *key)
{
	(void)ctx;
	if (key && (!*key || strlen(key) > TSEC__BK_MAX))
		abort();
}

static void alive(void *ctx, int64_t sent_ms)
{
	(void)ctx;
	if (sent_ms <= 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	atomic_ulong scanned = 0;
	struct tsec__etcd_stream w = { .b = { .max = LINE }, .fn = tsec__etcd_on_result,
				       .scanned = &scanned };
	size_t chunk = size ? (size_t)data[0] % 64 + 1 : 1, o = 1;
	char *copy;

	if (!e) {
		if (!(e = calloc(1, sizeof(*e))))
			abort();
		strcpy(e->prefix, "tp");
		e->plen = 2;
		strcpy(e->beat_id, "0123456789abcdef");
		e->beat_klen = tsec__etcd_bk(e, 'b', "feed", e->beat_key);
		e->ring[7].seq = 7;
		e->ring[7].at = 1234;
		pthread_mutex_init(&e->beat_mu, NULL);
		e->sink.changed = changed;
		e->sink.alive = alive;
	}
	w.ctx = e;
	if (size < 1)
		return 0;
	/* curl's buffer is writable and not NUL-terminated: so is this. */
	if (!(copy = malloc(size)))
		return 0;
	memcpy(copy, data, size);
	while (o < size) {
		size_t n = size - o < chunk ? size - o : chunk;
		size_t took = tsec__etcd_stream_take(copy + o, 1, n, &w);

		if (took != n)
			break;           /* ended: a line too long, or the reader stopped */
		if (w.b.n > LINE)
			abort();
		o += n;
	}
	if (atomic_load(&scanned) > size)
		abort();             /* each byte looked at once */
	free(w.b.p);
	free(copy);
	return 0;
}
