/*
 * Storage keys: validation by the key rules (docs/policy.md) and the
 * attributes derived from certmagic's layout.
 */
#include <stdio.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/bytes.h"
#include "common/key.h"

#define SEGMENT_MAX 255

static int fail(char *why, size_t whylen, const char *msg, size_t at)
{
	if (why && whylen)
		snprintf(why, whylen, "%s (byte %zu)", msg, at);
	return TSEC_EKEY;
}


/* Segment i is the literal s (n bytes, 4 <= n <= 16: two loads each). */
#define SEG_IS(k, i, s) seg_is((k), (i), (s), sizeof(s) - 1)
static inline bool seg_is(const struct tsec__key *k, unsigned i, const char *s, size_t n)
{
	const char *p = k->base + k->off[i];

	if (i >= k->nseg || k->len[i] != n)
		return false;
	if (n >= 8)
		return tsec__load8(p) == tsec__load8(s) &&
		       tsec__load8(p + n - 8) == tsec__load8(s + n - 8);
	return tsec__load4(p) == tsec__load4(s) && tsec__load4(p + n - 4) == tsec__load4(s + n - 4);
}

/* Segment i ends in the 4-byte s and is longer. */
static inline bool seg_ends4(const struct tsec__key *k, unsigned i, const char *s)
{
	return k->len[i] > 4 && tsec__load4(k->base + k->off[i] + k->len[i] - 4) == tsec__load4(s);
}

static void derive(struct tsec__key *k)
{
	k->derived = 1;
	k->kind = TSEC_KIND_OTHER;
	k->issuer_seg = -1;
	k->domain_seg = -1;
	k->domain_wild = 0;
	if (k->nseg == 0)
		return;
	if (SEG_IS(k, 0, "certificates")) {
		if (k->nseg >= 2)
			k->issuer_seg = 1;
		if (k->nseg >= 3)
			k->domain_seg = 2;
		if (k->nseg == 4) {
			if (seg_ends4(k, 3, ".crt"))
				k->kind = TSEC_KIND_CERT;
			else if (seg_ends4(k, 3, ".key"))
				k->kind = TSEC_KIND_KEY;
			else if (k->len[3] > 5 && seg_ends4(k, 3, "json") &&
				 k->base[k->off[3] + k->len[3] - 5] == '.')
				k->kind = TSEC_KIND_META;
		}
	} else if (SEG_IS(k, 0, "ocsp")) {
		if (k->nseg >= 2)
			k->kind = TSEC_KIND_OCSP;
	} else if (SEG_IS(k, 0, "acme")) {
		if (k->nseg >= 2)
			k->issuer_seg = 1;
		if (k->nseg >= 4 && SEG_IS(k, 2, "users"))
			k->kind = TSEC_KIND_ACCOUNT;
	} else if (SEG_IS(k, 0, "locks")) {
		if (k->nseg == 2)
			k->kind = TSEC_KIND_LOCK;
	} else if (SEG_IS(k, 0, "names")) {
		/* cert.obtain's resource: the name asked for is its domain. */
		if (k->nseg == 2)
			k->domain_seg = 1;
	}
	if (k->domain_seg >= 0) {
		const char *d = k->base + k->off[k->domain_seg];
		k->domain_wild = k->len[k->domain_seg] > TSEC__WILDCARD_PREFIX_LEN &&
			tsec__load8(d) == tsec__load8(TSEC__WILDCARD_PREFIX) && d[8] == '_';
	}
}

/* Checks segment p[start..start+len) and appends it; 1: skipped (empty, "."). */
static inline int segment(struct tsec__key *k, const char *p, size_t start,
			  size_t len, char *why, size_t whylen)
{
	if (len == 0 || (len == 1 && p[start] == '.')) {
		k->normal = 0;
		return 1;
	}
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
	return 0;
}

/* The byte loop: every key, one byte (or UTF-8 sequence) at a time. */
static int parse_bytes(const char *p, size_t n, struct tsec__key *k,
		       char *why, size_t whylen)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = 0;

	while (i < n) {
		size_t start = i;
		int rc;

		/* One segment: up to the next '/' or the end. */
		while (i < n && p[i] != '/') {
			unsigned c = u[i];
			uint32_t cp;
			size_t l;

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
			if (c < 0x80) {          /* the space */
				i++;
				continue;
			}
			l = tsec__utf8_seq(u + i, n - i, &cp);
			if (l == 0 || cp <= 0x9f)
				return fail(why, whylen, "invalid UTF-8 or C1 control in key", i);
			if (tsec__invisible_cp(cp))
				return fail(why, whylen, "bidirectional or invisible character "
					    "in key", i);
			i += l;
		}
		rc = segment(k, p, start, i - start, why, whylen);
		if (rc == TSEC_EKEY)
			return rc;
		if (i < n)
			i++; /* the '/' */
	}
	return 0;
}

#ifdef __SSE2__
/*
 * Sixteen bytes per load (SSE2, in every x86-64), two loads per step:
 * each step gives a mask of the bytes the byte loop would look at twice
 * (controls, space, '\\', ':', anything past 0x7e) and a mask of the '/'.
 * A key with such a byte is read by the byte loop instead, so both ways
 * give the same answer and the same error; keys under 16 bytes go there
 * too (a load must not reach past the caller's buffer, so the last load
 * is the key's last 16 bytes).  Returns 1 when the byte loop must read it.
 */
struct blk {
	__m128i sp, del, bs, co, sl;
};

static inline void blk16(const struct blk *c, const char *q, uint32_t *bad,
			 uint32_t *slash)
{
	__m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
	/* Signed compare: bytes past 0x7f are negative, so not > 0x20. */
	__m128i b = _mm_or_si128(
		_mm_andnot_si128(_mm_cmpgt_epi8(v, c->sp), _mm_set1_epi8(-1)),
		_mm_or_si128(_mm_cmpeq_epi8(v, c->del),
			     _mm_or_si128(_mm_cmpeq_epi8(v, c->bs), _mm_cmpeq_epi8(v, c->co))));

	*bad = (uint32_t)_mm_movemask_epi8(b);
	*slash = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, c->sl));
}

static int parse_blocks(const char *p, size_t n, struct tsec__key *k,
			char *why, size_t whylen)
{
	const struct blk c = {
		_mm_set1_epi8(0x20), _mm_set1_epi8(0x7f), _mm_set1_epi8('\\'),
		_mm_set1_epi8(':'), _mm_set1_epi8('/'),
	};
	size_t start = 0;
	unsigned ns = 0;             /* k->nseg, kept in a register */

	for (size_t b = 0; b < n; b += 32) {
		size_t r = n - b;
		uint32_t b0, s0, b1, s1, bad, slash;

		/* Masks of bytes b..min(b+32, n), bit 0 for byte b. */
		if (r >= 32) {
			blk16(&c, p + b, &b0, &s0);
			blk16(&c, p + b + 16, &b1, &s1);
			bad = b0 | b1 << 16;
			slash = s0 | s1 << 16;
		} else if (r > 16) {
			blk16(&c, p + b, &b0, &s0);
			blk16(&c, p + n - 16, &b1, &s1);
			bad = b0 | b1 << (r - 16);
			slash = s0 | s1 << (r - 16);
		} else {
			blk16(&c, p + n - 16, &b1, &s1);
			bad = b1 >> (16 - r);
			slash = s1 >> (16 - r);
		}
		if (bad)
			return 1;
		for (; slash; slash &= slash - 1) {
			size_t e = b + (size_t)__builtin_ctz(slash), len = e - start;
			/* The usual segment in one test; the rest as the byte loop does. */
			if (len >= 2 && len <= SEGMENT_MAX && p[e - 1] != '.' &&
			    ns < TSEC_KEY_SEGMENTS) {
				k->off[ns] = (uint16_t)start;
				k->len[ns++] = (uint16_t)len;
			} else {
				k->nseg = (uint16_t)ns;
				if (segment(k, p, start, len, why, whylen) == TSEC_EKEY)
					return TSEC_EKEY;
				ns = k->nseg;
			}
			start = e + 1;
		}
	}
	k->nseg = (uint16_t)ns;
	if (start < n && segment(k, p, start, n - start, why, whylen) == TSEC_EKEY)
		return TSEC_EKEY;
	return 0;
}
#endif

int tsec__key_parse_bytes(const char *p, size_t n, bool allow_root,
			  struct tsec__key *k, char *why, size_t whylen)
{
	int rc;

	k->base = p;
	k->nseg = 0;
	k->derived = 0;
	k->normal = 1;
	k->tlen = 0;
	if (!p && n)
		return fail(why, whylen, "key is NULL", 0);
	if (n > TSEC_KEY_MAX)
		return fail(why, whylen, "key longer than 1024 bytes", TSEC_KEY_MAX);
	if ((rc = parse_bytes(p, n, k, why, whylen)))
		return rc;
	k->tlen = (uint16_t)n;
	if (n && p[n - 1] == '/')
		k->normal = 0;
	if (k->nseg == 0 && !allow_root)
		return fail(why, whylen, "key reduces to the root", 0);
	derive(k);
	return 0;
}

__attribute__((hot))
int tsec__key_split(const char *p, size_t n, bool allow_root,
		    struct tsec__key *k, char *why, size_t whylen)
{
#ifdef __SSE2__
	int rc;

	if (n < 16 || n > TSEC_KEY_MAX)
		return tsec__key_parse_bytes(p, n, allow_root, k, why, whylen);
	k->base = p;
	k->nseg = 0;
	k->derived = 0;
	k->normal = p[n - 1] != '/';
	k->tlen = (uint16_t)n;
	rc = parse_blocks(p, n, k, why, whylen);
	if (rc == 1)
		return tsec__key_parse_bytes(p, n, allow_root, k, why, whylen);
	if (rc)
		return rc;
	if (k->nseg == 0 && !allow_root)
		return fail(why, whylen, "key reduces to the root", 0);
	return 0;
#else
	return tsec__key_parse_bytes(p, n, allow_root, k, why, whylen);
#endif
}

void tsec__key_derive(struct tsec__key *k)
{
	if (!k->derived)
		derive(k);
}

int tsec__key_parse(const char *p, size_t n, bool allow_root,
		    struct tsec__key *k, char *why, size_t whylen)
{
	int rc = tsec__key_split(p, n, allow_root, k, why, whylen);

	if (!rc)
		tsec__key_derive(k);
	return rc;
}

/* The normal form's length: the segments with one '/' between each
 * (k->nseg > 0). */
static inline size_t joined_len(const struct tsec__key *k)
{
	size_t n = k->nseg - 1u;

	for (unsigned i = 0; i < k->nseg; i++)
		n += k->len[i];
	return n;
}

bool tsec__key_is_normal(const struct tsec__key *k, size_t len)
{
	/* Segments are maximal runs between '/': the text is its normal
	 * form when the reader skipped none and it does not end in '/'. */
	return k->normal && k->tlen == len;
}

size_t tsec__key_format(const struct tsec__key *k, char *out, size_t outlen)
{
	size_t o = 0;

	if (outlen == 0)
		return 0;
	if (k->normal && k->tlen < outlen) {
		tsec__copy(out, k->base, k->tlen);
		out[k->tlen] = '\0';
		return k->tlen;
	}
	if (k->nseg) {
		/* Already normal (one '/' between segments): one copy. */
		unsigned last = k->nseg - 1u;
		size_t span = (size_t)k->off[last] + k->len[last] - k->off[0], n = joined_len(k);
		if (span == n && n < outlen) {
			memcpy(out, k->base + k->off[0], n);
			out[n] = '\0';
			return n;
		}
	}
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
	tsec__copy(out + o, s, l);
	o += l;
	out[o] = '\0';
	return o;
}
