/*
 * libFuzzer: Check and Evaluate through the real bus and module on the
 * example policy.  The input is split at NUL bytes into principal, role,
 * action, resource, dest and cert_pem; its first byte picks the context.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tsec_bus *bus;
static struct tsec_report rep;

static void fields(const uint8_t *data, size_t size, struct tsec_str *f, int nf)
{
	size_t o = 0;

	for (int i = 0; i < nf; i++) {
		const uint8_t *end = o < size ? memchr(data + o, 0, size - o) : NULL;
		size_t n = end ? (size_t)(end - (data + o)) : size - (o < size ? o : size);
		f[i].ptr = (const char *)data + (o < size ? o : size);
		f[i].len = n;
		o += n + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec_str f[6];
	struct tsec_request r[2];
	struct tsec_decision d[2];
	struct tsec_error err;
	uint8_t flags = size ? data[0] : 0;

	if (!bus) {
		if (tsec_bus_new(&bus) ||
		    tsec_bus_load_file(bus, "policy", TSEC_FUZZ_MODULE, "examples/policy.json", &err))
			abort();
	}
	if (size)
		data++, size--;
	fields(data, size, f, 6);
	memset(r, 0, sizeof(r));
	r[0].principal = f[0];
	r[0].roles = &f[1];
	r[0].nroles = flags & 1;
	r[0].action = f[2];
	r[0].resource = f[3];
	r[0].ctx.has = (uint32_t)(flags >> 1) & TSEC_CTX__ALL;
	r[0].ctx.ttl_ms = (uint64_t)size * 7919u;
	r[0].ctx.size = (uint64_t)size * 104729u;
	r[0].ctx.recursive = flags >> 7;
	r[0].ctx.now = (int64_t)((uint64_t)flags << 56);
	r[0].ctx.dest = f[4];
	r[0].ctx.cert_pem = f[5];
	r[1] = r[0];
	r[1].ctx.has ^= TSEC_CTX_NOW;
	tsec_bus_check(bus, "policy", r, 2, d, &err);
	tsec_bus_evaluate(bus, "policy", &r[0], &rep, &err);
	return 0;
}
