/* Reading a caller's option struct by its leading size, and backend
 * options by name (opts.h). */
#include <string.h>

#include "common/error.h"
#include "common/opts.h"
#include "common/suggest.h"

int tsec__opts_take(void *out, size_t have, size_t min, const void *in, const char *what,
		    struct tsec_error *err)
{
	size_t size;

	memcpy(&size, in, sizeof(size));
	if (size == 0)
		size = min;
	/* No options struct is this large: what stands in size is something
	 * else, most likely the first pointer of a struct from before options
	 * carried their size (a program built against an older header; a Go
	 * build cache holding such an object).  Refused before a byte past
	 * the struct is read. */
	if (size > TSEC__OPTS_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "size", "%s: the leading size (%zu) is no "
				    "struct's: a program built against a tinysecurity header "
				    "from before options had a size? rebuild it", what, size);
	if (size < min)
		return tsec__seterr(err, TSEC_EINVAL, "size", "%s of %zu bytes: none was ever "
				    "below %zu (set .size = sizeof, or 0)", what, size, min);
	for (size_t i = have; i < size; i++)
		if (((const unsigned char *)in)[i])
			return tsec__seterr(err, TSEC_EINVAL, "size", "%s of %zu bytes set a field "
					    "past the %zu this library knows: built against a "
					    "newer tinysecurity", what, size, have);
	memset(out, 0, have);
	memcpy(out, in, size < have ? size : have);
	memcpy(out, &have, sizeof(have));
	return 0;
}

/* One name=value of params at *p: its name and raw value (borrowed),
 * *p moved past it and its '&'.  0, or -1 at the end. */
static int next_pair(const char **p, const char **name, size_t *nlen, const char **val,
		     size_t *vlen)
{
	const char *s = *p, *amp, *eq;

	if (!s || !*s)
		return -1;
	amp = strchr(s, '&');
	if (!amp)
		amp = s + strlen(s);
	eq = memchr(s, '=', (size_t)(amp - s));
	*name = s;
	*nlen = eq ? (size_t)(eq - s) : (size_t)(amp - s);
	*val = eq ? eq + 1 : amp;
	*vlen = eq ? (size_t)(amp - eq - 1) : 0;
	*p = *amp ? amp + 1 : amp;
	return eq ? 0 : 1;       /* 1: no '=' */
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes v[0..n) into out (TSEC__PARAM_MAX + 1): its length, or -1 for
 * a bad escape, a NUL or too long. */
static long decode(const char *v, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)v[i];

		if (c == '%') {
			if (i + 2 >= n || hexval(v[i + 1]) < 0 || hexval(v[i + 2]) < 0)
				return -1;
			c = hexval(v[i + 1]) * 16 + hexval(v[i + 2]);
			i += 2;
		}
		if (c == 0 || o >= TSEC__PARAM_MAX)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = 0;
	return (long)o;
}

int tsec__params_check(const char *params, const char *const *known, const char *who,
		       struct tsec_error *err)
{
	const char *p = params, *name, *val, *q, *n2, *v2;
	size_t nlen, vlen, n2len, v2len, nknown = 0, pairs = 0;
	char out[TSEC__PARAM_MAX + 1], nm[33];
	int r;

	while (known && known[nknown])
		nknown++;
	for (q = params; q && (q = strchr(q, '&')); q++)
		pairs += q[1] != '\0';  /* each '&' a pair more, but a last one */
	if (pairs >= TSEC__PARAMS_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "params", "options of %s: more than %d",
				    who, TSEC__PARAMS_MAX);
	while ((r = next_pair(&p, &name, &nlen, &val, &vlen)) >= 0) {
		size_t i;

		if (nlen == 0 || nlen > 32 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") < nlen)
			return tsec__seterr(err, TSEC_EINVAL, "params", "options of %s: \"%.*s\" "
					    "is not a name (1-32 of a-z, 0-9 and _)", who,
					    (int)(nlen > 32 ? 32 : nlen), name);
		memcpy(nm, name, nlen);
		nm[nlen] = 0;
		if (r == 1)
			return tsec__seterr(err, TSEC_EINVAL, "params", "options of %s: %s has "
					    "no value (name=value)", who, nm);
		for (i = 0; i < nknown && strcmp(nm, known[i]); i++)
			;
		if (i == nknown) {
			const char *near = tsec__nearest(nm, known, nknown);

			return tsec__seterr(err, TSEC_EINVAL, "params", "%s takes no option \"%s\"%s%s%s",
					    who, nm, near ? "; did you mean \"" : "",
					    near ? near : "", near ? "\"?" : "");
		}
		if (decode(val, vlen, out) < 0)
			return tsec__seterr(err, TSEC_EINVAL, "params", "options of %s: %s: a "
					    "value of at most %d bytes, %%XX escapes for the rest, "
					    "no NUL", who, nm, TSEC__PARAM_MAX);
		q = params;
		while (next_pair(&q, &n2, &n2len, &v2, &v2len) >= 0 && n2 != name)
			if (n2len == nlen && !memcmp(n2, name, nlen))
				return tsec__seterr(err, TSEC_EINVAL, "params", "options of %s: %s "
						    "given twice", who, nm);
	}
	return 0;
}

int tsec__param(const char *params, const char *name, char out[TSEC__PARAM_MAX + 1])
{
	const char *p = params, *n, *v;
	size_t nlen, vlen, want = strlen(name);

	while (next_pair(&p, &n, &nlen, &v, &vlen) >= 0)
		if (nlen == want && !memcmp(n, name, nlen))
			return decode(v, vlen, out) >= 0;
	return 0;
}
