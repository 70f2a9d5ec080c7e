/*
 * libFuzzer: what cert.obtain reads from outside.  First byte even: the
 * bytes are a name as a caller sends it (Caddy's ?domain=, the method's
 * "name"); one read must make a resource the key rules take, under
 * names/, and a suffix the name ends with.  Odd: the bytes are a count's
 * record as the storage holds it; one that reads is an array of [name,
 * time] pairs.
 */
#include <libpsl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/obtain.h"
#include "common/key.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tsec__daemon d;

static void name_case(const char *in, size_t n)
{
	struct tsec__obtained o;
	struct tsec__key k;
	char why[128];
	size_t rl, nl, sl;

	memset(&o, 0, sizeof(o));
	if (tsec__obtain_name(&d, in, n, &o)) {
		if (strncmp(o.reason, "name: ", 6))
			abort();
		return;
	}
	rl = strlen(o.resource);
	nl = strlen(o.name);
	sl = strlen(o.suffix);
	if (strncmp(o.resource, "names/", 6) || rl < 7 || !nl || !sl || sl > nl ||
	    tsec__key_parse(o.resource, rl, false, &k, why, sizeof(why)) || k.nseg != 2)
		abort();
	/* The count's suffix is the name or its last labels. */
	if (sl < nl && (o.name[nl - sl - 1] != '.' || strcmp(o.name + nl - sl, o.suffix)))
		abort();
}

static void record_case(const char *in, size_t n)
{
	const char *why = NULL;
	json_t *names = tsec__obtain_record_read(in, n, "svc:edge", "example.com",
						 2000000000, 3600, &why);
	size_t i;
	json_t *e;

	if (!names) {
		if (!why)
			abort();
		return;
	}
	json_array_foreach(names, i, e)
		if (!json_is_string(json_array_get(e, 0)) ||
		    json_integer_value(json_array_get(e, 1)) <= 2000000000 - 3600)
			abort();
	json_decref(names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!d.psl)
		d.psl = psl_latest(NULL);
	if (size == 0)
		return 0;
	if (data[0] & 1)
		record_case((const char *)data + 1, size - 1);
	else
		name_case((const char *)data + 1, size - 1);
	return 0;
}
