/*
 * Storage keys: validation by the key rules (README, "Writing a policy") and the
 * attributes derived from certmagic's layout.
 */
#include <stdio.h>
#include <string.h>

#include "common/key.h"

#define SEGMENT_MAX 255

static int fail(char *why, size_t whylen, const char *msg, size_t at)
{
	if (why && whylen)
		snprintf(why, whylen, "%s (byte %zu)", msg, at);
	return TSEC_EKEY;
}

/*
 * Length of the UTF-8 sequence at p[0..n) or 0 if it is not valid UTF-8
 * (overlong forms, surrogates and code points past U+10FFFF are invalid).
 * C1 controls (U+0080..U+009F) count as invalid here too.
 */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t need;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((need == 3 && cp < 0x800) || (need == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ||
	    (cp >= 0x80 && cp <= 0x9f))
		return 0;
	return need;
}

static bool seg_is(const struct tsec__key *k, unsigned i, const char *s)
{
	size_t n = strlen(s);
	return i < k->nseg && k->len[i] == n &&
	       memcmp(k->base + k->off[i], s, n) == 0;
}

static bool seg_ends(const struct tsec__key *k, unsigned i, const char *s)
{
	size_t n = strlen(s);
	return k->len[i] > n &&
	       memcmp(k->base + k->off[i] + k->len[i] - n, s, n) == 0;
}

static void derive(struct tsec__key *k)
{
	k->kind = TSEC_KIND_OTHER;
	k->issuer_seg = -1;
	k->domain_seg = -1;
	k->domain_wild = 0;
	if (k->nseg == 0)
		return;
	if (seg_is(k, 0, "certificates")) {
		if (k->nseg >= 2)
			k->issuer_seg = 1;
		if (k->nseg >= 3)
			k->domain_seg = 2;
		if (k->nseg == 4) {
			if (seg_ends(k, 3, ".crt"))
				k->kind = TSEC_KIND_CERT;
			else if (seg_ends(k, 3, ".key"))
				k->kind = TSEC_KIND_KEY;
			else if (seg_ends(k, 3, ".json"))
				k->kind = TSEC_KIND_META;
		}
	} else if (seg_is(k, 0, "ocsp")) {
		if (k->nseg >= 2)
			k->kind = TSEC_KIND_OCSP;
	} else if (seg_is(k, 0, "acme")) {
		if (k->nseg >= 2)
			k->issuer_seg = 1;
		if (k->nseg >= 4 && seg_is(k, 2, "users"))
			k->kind = TSEC_KIND_ACCOUNT;
	} else if (seg_is(k, 0, "locks")) {
		if (k->nseg == 2)
			k->kind = TSEC_KIND_LOCK;
	}
	if (k->domain_seg >= 0) {
		unsigned d = (unsigned)k->domain_seg;
		k->domain_wild = k->len[d] > TSEC__WILDCARD_PREFIX_LEN &&
			memcmp(k->base + k->off[d], TSEC__WILDCARD_PREFIX,
			       TSEC__WILDCARD_PREFIX_LEN) == 0;
	}
}

__attribute__((hot))
int tsec__key_parse(const char *p, size_t n, bool allow_root,
		    struct tsec__key *k, char *why, size_t whylen)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = 0;

	k->base = p;
	k->nseg = 0;
	if (!p && n)
		return fail(why, whylen, "key is NULL", 0);
	if (n > TSEC_KEY_MAX)
		return fail(why, whylen, "key longer than 1024 bytes", TSEC_KEY_MAX);

	while (i < n) {
		size_t start = i, len;

		/* One segment: up to the next '/' or the end. */
		while (i < n && p[i] != '/') {
			unsigned c = u[i];
			size_t l;

			/* Fast path: printable ASCII other than '\\' and ':'. */
			if (c > 0x20 && c < 0x7f && c != '\\' && c != ':') {
				i++;
				continue;
			}

			if (c == 0)
				return fail(why, whylen, "NUL byte in key", i);
			if (c < 0x20 || c == 0x7f)
				return fail(why, whylen, "control character in key", i);
			if (c == '\\')
				return fail(why, whylen, "backslash in key", i);
			if (c == ':')
				return fail(why, whylen, "colon in key", i);
			l = utf8_len(u + i, n - i);
			if (l == 0)
				return fail(why, whylen, "invalid UTF-8 or C1 control in key", i);
			i += l;
		}
		len = i - start;
		if (i < n)
			i++; /* the '/' */
		if (len == 0 || (len == 1 && p[start] == '.'))
			continue;
		if (len == 2 && p[start] == '.' && p[start + 1] == '.')
			return fail(why, whylen, "'..' segment in key", start);
		if (p[start + len - 1] == '.' || p[start + len - 1] == ' ')
			return fail(why, whylen, "segment ends in dot or space", start);
		if (len > SEGMENT_MAX)
			return fail(why, whylen, "segment longer than 255 bytes", start);
		if (k->nseg == TSEC_KEY_SEGMENTS)
			return fail(why, whylen, "key has more than 64 segments", start);
		k->off[k->nseg] = (uint16_t)start;
		k->len[k->nseg] = (uint16_t)len;
		k->nseg++;
	}
	if (k->nseg == 0 && !allow_root)
		return fail(why, whylen, "key reduces to the root", 0);
	derive(k);
	return 0;
}

size_t tsec__key_format(const struct tsec__key *k, char *out, size_t outlen)
{
	size_t o = 0;

	if (outlen == 0)
		return 0;
	for (unsigned i = 0; i < k->nseg; i++) {
		size_t l = k->len[i];
		if (o + (i > 0) + l >= outlen)
			break;
		if (i > 0)
			out[o++] = '/';
		memcpy(out + o, k->base + k->off[i], l);
		o += l;
	}
	out[o] = '\0';
	return o;
}

size_t tsec__key_domain(const struct tsec__key *k, char *out, size_t outlen)
{
	const char *s;
	size_t l, o = 0;

	if (k->domain_seg < 0 || outlen < 3) {
		if (outlen)
			out[0] = '\0';
		return 0;
	}
	s = k->base + k->off[k->domain_seg];
	l = k->len[k->domain_seg];
	if (k->domain_wild) {
		s += TSEC__WILDCARD_PREFIX_LEN;
		l -= TSEC__WILDCARD_PREFIX_LEN;
		out[o++] = '*';
		if (l == 0 || s[0] != '.')
			out[o++] = '.';
	}
	if (o + l >= outlen)
		l = outlen - o - 1;
	memcpy(out + o, s, l);
	o += l;
	out[o] = '\0';
	return o;
}
