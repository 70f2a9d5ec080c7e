/*
 * Internal: small byte helpers shared by the key reader, the module and
 * the JSON writer: unaligned loads, and one UTF-8 decoder.
 */
#ifndef TSEC_COMMON_BYTES_H
#define TSEC_COMMON_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t tsec__load8(const char *p)
{
	uint64_t w;
	memcpy(&w, p, 8);
	return w;
}

static inline uint32_t tsec__load4(const char *p)
{
	uint32_t w;
	memcpy(&w, p, 4);
	return w;
}

/*
 * memcpy of a short run without a call: 16-byte moves, the last one
 * overlapping the one before it (and 8, 4 or single bytes under 16).
 * d and s must not overlap.
 */
static inline void tsec__copy(char *d, const char *s, size_t n)
{
	if (n >= 16) {
		for (size_t i = 0; i + 16 < n; i += 16)
			memcpy(d + i, s + i, 16);
		memcpy(d + n - 16, s + n - 16, 16);
	} else if (n >= 8) {
		uint64_t a = tsec__load8(s), b = tsec__load8(s + n - 8);
		memcpy(d, &a, 8);
		memcpy(d + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t a = tsec__load4(s), b = tsec__load4(s + n - 4);
		memcpy(d, &a, 4);
		memcpy(d + n - 4, &b, 4);
	} else {
		for (size_t i = 0; i < n; i++)
			d[i] = s[i];
	}
}

/*
 * The UTF-8 sequence at p[0..n) whose lead byte is 0x80 or more: its
 * length, with its code point in *cp, or 0 if it is not valid UTF-8
 * (a stray continuation, an overlong form, a surrogate, a code point past
 * U+10FFFF, or a sequence cut short).
 */
static inline size_t tsec__utf8_seq(const unsigned char *p, size_t n, uint32_t *cp)
{
	unsigned c = p[0];
	size_t need;
	uint32_t v;

	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
		v = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		v = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		v = c & 0x07;
	} else {
		return 0;
	}
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (p[i] & 0x3f);
	}
	if ((need == 3 && v < 0x800) || (need == 4 && v < 0x10000) ||
	    (v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff)
		return 0;
	*cp = v;
	return need;
}

/*
 * The bytes of x that need a JSON writer's or reader's look: below 0x20,
 * '"', '\\', or 0x80 and up (exact has-less and has-byte tests, without
 * carries between bytes); with del, 0x7f too.  Each such byte's high bit
 * is set in the result, and only theirs.
 */
static inline uint64_t tsec__json_special_mask(uint64_t x, bool del)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	const uint64_t low7 = 0x7f7f7f7f7f7f7f7full;
	uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\'), d = x ^ (ones * 0x7f);
	uint64_t lt = ~(((x & low7) + (ones * (0x80 - 0x20))) | x) & high;
	uint64_t zq = ~(((q & low7) + low7) | q) & high;
	uint64_t zb = ~(((b & low7) + low7) | b) & high;
	uint64_t zd = del ? ~(((d & low7) + low7) | d) & high : 0;

	return (x & high) | lt | zq | zb | zd;
}

/* Whether any of the 8 bytes in x needs a look (as above). */
static inline bool tsec__json_special8(uint64_t x, bool del)
{
	return tsec__json_special_mask(x, del) != 0;
}

/* The index (0..7) in memory order of the first byte a non-zero mask of
 * tsec__json_special_mask marks, for x loaded with memcpy. */
static inline unsigned tsec__first_marked(uint64_t mask)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	return (unsigned)__builtin_clzll(mask) >> 3;
#else
	return (unsigned)__builtin_ctzll(mask) >> 3;
#endif
}

/*
 * Code points that change how the text around them is shown without
 * showing themselves: bidirectional controls (U+202E turns
 * "key.crt" into "trc.yek"), zero-width and invisible formatting
 * characters, line and paragraph separators, the BOM, tag characters.
 * Keys refuse them; the JSON writer escapes them as \uXXXX.
 */
static inline int tsec__invisible_cp(uint32_t cp)
{
	return cp == 0x00ad || cp == 0x061c || cp == 0x180e ||
	       (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
	       (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206f) ||
	       cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) ||
	       (cp >= 0xe0000 && cp <= 0xe007f);
}

#endif
