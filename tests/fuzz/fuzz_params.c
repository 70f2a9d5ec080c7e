/*
 * libFuzzer: a backend's options by name (common/opts.c), which the
 * broker's configuration and a caller's tsec_store_opts.params feed.
 * Any bytes: the check must not read past the string; what it accepts, a
 * plain reader (split at '&', then at the first '=') must read as the
 * same names, each known and once, each value found by tsec__param and
 * decoded within its bound; and that value, escaped again, must be read
 * back the same.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/opts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const known[] = { "db", "a", "b_c", NULL };

static void escaped(const char *name, const char *v, char *out)
{
	size_t o = (size_t)sprintf(out, "%s=", name);

	for (; *v; v++)
		o += (size_t)sprintf(out + o, "%%%02X", (unsigned char)*v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = strndup((const char *)data, size), *copy, *save = NULL;
	static char val[TSEC__PARAM_MAX + 1], again[TSEC__PARAM_MAX + 1];
	static char re[3 * TSEC__PARAM_MAX + 64];
	struct tsec_error err;
	int seen[3] = { 0 };

	if (!s)
		return 0;
	if (tsec__params_check(s, known, "the fuzzed backend", &err) ||
	    !(copy = strdup(s))) {
		free(s);
		return 0;
	}
	/* Accepted: "" or pairs, each name known and once. */
	for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(pair, '=');
		int k = -1;

		if (!eq)
			abort();
		*eq = 0;
		for (int i = 0; known[i]; i++)
			if (!strcmp(pair, known[i]))
				k = i;
		if (k < 0 || seen[k]++)
			abort();
		if (tsec__param(s, pair, val) != 1 || strlen(val) > TSEC__PARAM_MAX)
			abort();
		escaped(pair, val, re);
		if (tsec__params_check(re, known, "the fuzzed backend", &err) ||
		    tsec__param(re, pair, again) != 1 || strcmp(val, again))
			abort();
	}
	free(copy);
	free(s);
	return 0;
}
