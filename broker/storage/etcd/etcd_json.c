/*
 * The etcd v3 gateway's JSON (etcd_http.h, "JSON helpers"): bytes are
 * base64 strings, 64-bit numbers decimal strings.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/storage/etcd/etcd_http.h"

json_t *tsec__b64(const void *p, size_t n)
{
	size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(cap);
	json_t *j;

	if (!s)
		return NULL;
	sodium_bin2base64(s, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
	j = json_string(s);
	free(s);
	return j;
}

int tsec__unb64(const json_t *o, const char *name, uint8_t **out, size_t *len)
{
	const char *s = json_string_value(json_object_get(o, name));
	size_t sl, bl = 0;

	*out = NULL;
	*len = 0;
	if (!s)
		s = "";                  /* the gateway leaves out empty values */
	sl = strlen(s);
	if (!(*out = malloc(sl / 4 * 3 + 4)))
		return -1;
	if (sodium_base642bin(*out, sl / 4 * 3 + 3, s, sl, NULL, &bl, NULL,
			      sodium_base64_VARIANT_ORIGINAL)) {
		free(*out);
		*out = NULL;
		return -1;
	}
	(*out)[bl] = '\0';
	*len = bl;
	return 0;
}

int64_t tsec__jint(const json_t *o, const char *name, int64_t def)
{
	const json_t *v = json_object_get(o, name);
	const char *s;
	char *end;
	long long n;

	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	if (!(s = json_string_value(v)) || !*s)
		return def;
	errno = 0;
	n = strtoll(s, &end, 10);
	return errno || *end ? def : (int64_t)n;
}

json_t *tsec__jnum(int64_t v)
{
	char b[24];

	snprintf(b, sizeof(b), "%lld", (long long)v);
	return json_string(b);
}
