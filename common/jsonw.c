/* The JSON text writer (see jsonw.h). */
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/bytes.h"
#include "common/jsonw.h"

void tsec__jw_init(struct tsec__jw *w)
{
	w->buf = NULL;
	w->len = w->cap = 0;
	w->failed = false;
	w->borrowed = false;
}

void tsec__jw_reset(struct tsec__jw *w)
{
	if (!w->borrowed && w->cap > 65536)
		tsec__jw_free(w);
	w->len = 0;
	w->failed = false;
}

void tsec__jw_init_on(struct tsec__jw *w, char *buf, size_t cap)
{
	w->buf = buf;
	w->len = 0;
	w->cap = cap;
	w->failed = false;
	w->borrowed = true;
}

/* Room for n more bytes and a NUL; false (and failed) without memory. */
static bool room(struct tsec__jw *w, size_t n)
{
	size_t need, cap;
	char *b;

	if (w->failed)
		return false;
	if (n <= w->cap - w->len && w->len + n < w->cap)
		return true;
	if (n > SIZE_MAX / 2 - w->len) {
		w->failed = true;
		return false;
	}
	need = w->len + n + 1;
	cap = w->cap ? w->cap : 256;
	while (cap < need)
		cap *= 2;
	if (!(b = w->borrowed ? malloc(cap) : realloc(w->buf, cap))) {
		w->failed = true;
		return false;
	}
	if (w->borrowed && w->len)
		memcpy(b, w->buf, w->len);
	w->borrowed = false;
	w->buf = b;
	w->cap = cap;
	return true;
}

void tsec__jw_grow(struct tsec__jw *w, const char *s, size_t n)
{
	if (!room(w, n))
		return;
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

/*
 * What each byte needs: 0 copy, 1 escape (a control, '"', '\\', DEL),
 * 2 the lead of a UTF-8 sequence (checked, and escaped if C1).
 */
static const unsigned char cls[256] = {
	[0x00 ... 0x1f] = 1, ['"'] = 1, ['\\'] = 1, [0x7f] = 1,
	[0x80 ... 0xff] = 2,
};


static void escape(struct tsec__jw *w, uint32_t cp)
{
	static const char hex[] = "0123456789ABCDEF";
	char e[6] = { '\\', 'u', '0', '0', 0, 0 };

	switch (cp) {
	case '"': TSEC__JW_LIT(w, "\\\""); return;
	case '\\': TSEC__JW_LIT(w, "\\\\"); return;
	case '\b': TSEC__JW_LIT(w, "\\b"); return;
	case '\f': TSEC__JW_LIT(w, "\\f"); return;
	case '\n': TSEC__JW_LIT(w, "\\n"); return;
	case '\r': TSEC__JW_LIT(w, "\\r"); return;
	case '\t': TSEC__JW_LIT(w, "\\t"); return;
	default:
		break;
	}
	if (cp > 0xffff) {
		/* A pair of surrogates, as JSON spells a code point past the BMP. */
		cp -= 0x10000;
		escape(w, 0xd800 | (cp >> 10));
		escape(w, 0xdc00 | (cp & 0x3ff));
		return;
	}
	e[2] = hex[cp >> 12];
	e[3] = hex[(cp >> 8) & 15];
	e[4] = hex[(cp >> 4) & 15];
	e[5] = hex[cp & 15];
	tsec__jw_raw(w, e, 6);
}

void tsec__jw_str(struct tsec__jw *w, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	TSEC__JW_LIT(w, "\"");
	while (i < n) {
		size_t run = i, l;
		uint32_t cp;

		/* Sixteen bytes a step (SSE2), then eight, while none needs a
		 * look: no control, no '"', '\\', DEL or byte past ASCII (the
		 * usual key or name). */
#ifdef __SSE2__
		while (n - run >= 16) {
			__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(u + run));
			unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
				_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
					     _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
				_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f)),
					     _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)))));

			if (m) {
				run += (size_t)__builtin_ctz(m);
				goto look;
			}
			run += 16;
		}
#endif
		while (n - run >= 8) {
			uint64_t x, m;

			memcpy(&x, u + run, 8);
			if ((m = tsec__json_special_mask(x, true))) {
				run += tsec__first_marked(m);
				break;
			}
			run += 8;
		}
#ifdef __SSE2__
look:
#endif
		while (run < n && !cls[u[run]])
			run++;
		tsec__jw_raw(w, s + i, run - i);
		if ((i = run) == n)
			break;
		if (cls[u[i]] == 1) {
			escape(w, u[i]);
			i++;
		} else if ((l = tsec__utf8_seq(u + i, n - i, &cp)) == 0) {
			escape(w, 0xfffd);       /* not UTF-8: one replacement per byte */
			i++;
		} else if (cp <= 0x9f || tsec__invisible_cp(cp)) {
			escape(w, cp);           /* a C1 control, bidi or invisible */
			i += l;
		} else {
			tsec__jw_raw(w, s + i, l);
			i += l;
		}
	}
	TSEC__JW_LIT(w, "\"");
}

void tsec__jw_cstr(struct tsec__jw *w, const char *s)
{
	tsec__jw_str(w, s ? s : "", s ? strlen(s) : 0);
}

void tsec__jw_uint(struct tsec__jw *w, uint64_t v)
{
	/* Two digits a step: half the divisions of one at a time. */
	static const char pairs[201] =
		"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
		"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
		"8081828384858687888990919293949596979899";
	char d[24];
	size_t i = sizeof(d);

	while (v >= 100) {
		unsigned r = (unsigned)(v % 100);

		v /= 100;
		i -= 2;
		memcpy(d + i, pairs + 2 * r, 2);
	}
	if (v >= 10) {
		i -= 2;
		memcpy(d + i, pairs + 2 * v, 2);
	} else {
		d[--i] = (char)('0' + v);
	}
	tsec__jw_raw(w, d + i, sizeof(d) - i);
}

void tsec__jw_int(struct tsec__jw *w, int64_t v)
{
	if (v < 0) {
		TSEC__JW_LIT(w, "-");
		tsec__jw_uint(w, (uint64_t)0 - (uint64_t)v);
		return;
	}
	tsec__jw_uint(w, (uint64_t)v);
}

void tsec__jw_bool(struct tsec__jw *w, bool v)
{
	if (v)
		TSEC__JW_LIT(w, "true");
	else
		TSEC__JW_LIT(w, "false");
}

char *tsec__jw_take(struct tsec__jw *w, size_t *len)
{
	char *t = NULL;

	if (!w->failed && w->borrowed && (t = malloc(w->len + 1))) {
		memcpy(t, w->buf, w->len);
		t[w->len] = '\0';
		if (len)
			*len = w->len;
	} else if (!w->failed && !w->borrowed && room(w, 0)) {
		w->buf[w->len] = '\0';
		t = w->buf;
		if (len)
			*len = w->len;
		w->buf = NULL;
	}
	tsec__jw_free(w);
	return t;
}

void tsec__jw_free(struct tsec__jw *w)
{
	if (!w->borrowed)
		free(w->buf);
	tsec__jw_init(w);
}
