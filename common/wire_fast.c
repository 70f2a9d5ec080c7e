/* A Check message read without a tree (see wire_fast.h). */
#include <stdbool.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/bytes.h"
#include "common/wire_fast.h"

struct rd {
	const unsigned char *p, *end;
};

static inline void ws(struct rd *d)
{
	/* One comparison for the usual byte (compact JSON has no space). */
	while (d->p < d->end && *d->p <= ' ' &&
	       (*d->p == ' ' || *d->p == '\n' || *d->p == '\r' || *d->p == '\t'))
		d->p++;
}

static inline bool eat(struct rd *d, unsigned char c)
{
	ws(d);
	if (d->p < d->end && *d->p == c) {
		d->p++;
		return true;
	}
	return false;
}

#ifdef __SSE2__
/* Bit i set where p[i] needs a look: a quote, a backslash, a control
 * character or a byte past ASCII (as a signed byte, below 0x20). */
static inline unsigned special16(const unsigned char *p)
{
	__m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
	__m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
					      _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
				 _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));

	return (unsigned)_mm_movemask_epi8(m);
}
#endif

/*
 * A string without escapes: its bytes (between the quotes) into out.
 * False for anything else: an escape, a control character, invalid
 * UTF-8, no closing quote.
 */
static bool string(struct rd *d, struct tsec_str *out)
{
	const unsigned char *s;

	if (!eat(d, '"'))
		return false;
	s = d->p;
	for (;;) {
		/* Sixteen bytes a step (eight without SSE2), and straight to
		 * the first that needs a look (the closing quote, mostly). */
#ifdef __SSE2__
		while (d->end - d->p >= 16) {
			unsigned m = special16(d->p);

			if (m) {
				d->p += __builtin_ctz(m);
				goto look;
			}
			d->p += 16;
		}
#endif
		while (d->end - d->p >= 8) {
			uint64_t x, m;

			memcpy(&x, d->p, 8);
			if ((m = tsec__json_special_mask(x, false))) {
				d->p += tsec__first_marked(m);
				break;
			}
			d->p += 8;
		}
#ifdef __SSE2__
look:
#endif
		if (d->p >= d->end)
			return false;
		if (*d->p == '"')
			break;
		if (*d->p == '\\' || *d->p < 0x20)
			return false;
		if (*d->p < 0x80) {
			d->p++;
		} else {
			uint32_t cp;
			size_t l = tsec__utf8_seq(d->p, (size_t)(d->end - d->p), &cp);

			if (!l)
				return false;
			d->p += l;
		}
	}
	out->ptr = (const char *)s;
	out->len = (size_t)(d->p - s);
	d->p++;
	return true;
}

/* An object member's key, then its colon; at the object's end, true with
 * *end set. */
static bool key(struct rd *d, bool first, struct tsec_str *k, bool *end)
{
	*end = false;
	ws(d);
	if (d->p < d->end && *d->p == '}') {
		d->p++;
		*end = true;
		return true;
	}
	if (!first && !eat(d, ','))
		return false;
#ifdef __SSE2__
	/* The usual key, compact: a short plain name, its quote and colon
	 * found with one look at sixteen bytes. */
	if (d->end - d->p >= 18 && *d->p == '"') {
		unsigned m = special16(d->p + 1);

		if (m && d->p[1 + __builtin_ctz(m)] == '"' && d->p[2 + __builtin_ctz(m)] == ':') {
			k->ptr = (const char *)d->p + 1;
			k->len = __builtin_ctz(m);
			d->p += 3 + __builtin_ctz(m);
			return true;
		}
	}
#endif
	return string(d, k) && eat(d, ':');
}

static inline bool is(const struct tsec_str *k, const char *lit, size_t n)
{
	return k->len == n && !memcmp(k->ptr, lit, n);
}
#define IS(k, lit) is((k), (lit), sizeof(lit) - 1)

/* An integer of at most 18 digits (no fraction, no exponent): exact in
 * an int64 and read by jansson as this integer. */
static bool integer(struct rd *d, bool neg_ok, int64_t *out)
{
	const unsigned char *start;
	bool neg = false;
	int64_t v = 0;
	int digits = 0;

	ws(d);
	/* Nothing consumed unless it is one: a caller may try another
	 * reading from the same byte ("-null" is not null). */
	start = d->p;
	if (d->p < d->end && *d->p == '-') {
		if (!neg_ok)
			return false;
		neg = true;
		d->p++;
	}
	if (d->p >= d->end || *d->p < '0' || *d->p > '9')
		goto no;
	if (*d->p == '0') {
		d->p++;
	} else {
		while (d->p < d->end && *d->p >= '0' && *d->p <= '9') {
			if (++digits > 18)
				goto no;
			v = v * 10 + (*d->p++ - '0');
		}
	}
	if (d->p < d->end && (*d->p == '.' || *d->p == 'e' || *d->p == 'E' ||
			      (*d->p >= '0' && *d->p <= '9')))
		goto no;
	*out = neg ? -v : v;
	return true;
no:
	d->p = start;
	return false;
}

static bool literal(struct rd *d, const char *lit, size_t n)
{
	ws(d);
	if ((size_t)(d->end - d->p) < n || memcmp(d->p, lit, n))
		return false;
	d->p += n;
	return true;
}

static bool context(struct rd *d, struct tsec_context *x)
{
	struct tsec_str k;
	unsigned seen = 0;
	bool end;

	if (!eat(d, '{'))
		return false;
	for (bool first = true;; first = false) {
		unsigned bit;
		int64_t v;

		if (!key(d, first, &k, &end))
			return false;
		if (end)
			return true;
		if (IS(&k, "ttl_ms") || IS(&k, "size")) {
			bit = k.ptr[0] == 't' ? TSEC_CTX_TTL_MS : TSEC_CTX_SIZE;
			if ((seen & bit) || !integer(d, false, &v))
				return false;
			if (bit == TSEC_CTX_TTL_MS)
				x->ttl_ms = (uint64_t)v;
			else
				x->size = (uint64_t)v;
		} else if (IS(&k, "recursive")) {
			bit = TSEC_CTX_RECURSIVE;
			if (seen & bit)
				return false;
			if (literal(d, "true", 4))
				x->recursive = 1;
			else if (literal(d, "false", 5))
				x->recursive = 0;
			else
				return false;
		} else if (IS(&k, "dest")) {
			bit = TSEC_CTX_DEST;
			if ((seen & bit) || !string(d, &x->dest))
				return false;
		} else {
			return false;            /* now, cert_pem, unknown: jansson's */
		}
		seen |= bit;
		x->has |= bit;
	}
}

static bool request(struct rd *d, struct tsec_request *r)
{
	struct tsec_str k;
	bool end, ok, act = false, res = false, ctx = false;

	memset(r, 0, sizeof(*r));
	if (!eat(d, '{'))
		return false;
	for (bool first = true;; first = false) {
		if (!key(d, first, &k, &end))
			return false;
		if (end)
			return act && res;
		/* Each member once; anything else is jansson's. */
		if (IS(&k, "action") && !act) {
			act = true;
			ok = string(d, &r->action);
		} else if (IS(&k, "resource") && !res) {
			res = true;
			ok = string(d, &r->resource);
		} else if (IS(&k, "context") && !ctx) {
			ctx = true;
			ok = context(d, &r->ctx);
		} else {
			ok = false;
		}
		if (!ok)
			return false;
	}
}

static bool params(struct rd *d, struct tsec__fast_check *fc, struct tsec_request *r,
		   size_t max)
{
	struct tsec_str k;
	bool end, reqs = false;

	if (!eat(d, '{'))
		return false;
	for (bool first = true;; first = false) {
		if (!key(d, first, &k, &end))
			return false;
		if (end)
			return reqs;
		if (!IS(&k, "requests") || reqs || !eat(d, '['))
			return false;
		reqs = true;
		if (eat(d, ']'))
			return false;            /* none: jansson's error */
		do {
			if (fc->n == max || !request(d, &r[fc->n]))
				return false;
			fc->n++;
		} while (eat(d, ','));
		if (!eat(d, ']'))
			return false;
	}
}

/* The bytes lit[0..n) next, exactly (no space before them). */
static inline bool text(struct rd *d, const char *lit, size_t n)
{
	if ((size_t)(d->end - d->p) < n || memcmp(d->p, lit, n))
		return false;
	d->p += n;
	return true;
}
#define TEXT(d, lit) text((d), (lit), sizeof(lit) - 1)

/*
 * The shape the client library writes (jansson, compact, its members in
 * the order it adds them), matched as text: the names are compared as
 * the bytes they must be, not read and then looked up.  A subset of what
 * the reader below takes, with the same values; false at the first byte
 * that differs, and the reader below reads the message from the start.
 */
static bool compact(struct rd *d, struct tsec__fast_check *fc, struct tsec_request *r,
		    size_t max)
{
	if (!TEXT(d, "{\"id\":"))
		return false;
	if (d->p < d->end && *d->p == '"') {
		if (!string(d, &fc->id_str))
			return false;
		fc->id_kind = TSEC__FAST_ID_STRING;
	} else if (d->p < d->end && *d->p != 'n' && *d->p != ' ' && integer(d, true, &fc->id_int)) {
		fc->id_kind = TSEC__FAST_ID_INT;
	} else {
		return false;
	}
	if (!TEXT(d, ",\"method\":\"check\",\"params\":{\"requests\":["))
		return false;
	do {
		struct tsec_request *q = &r[fc->n];

		if (fc->n == max)
			return false;
		memset(q, 0, sizeof(*q));
		if (!TEXT(d, "{\"action\":") || !string(d, &q->action) ||
		    !TEXT(d, ",\"resource\":") || !string(d, &q->resource) ||
		    (TEXT(d, ",\"context\":") && !context(d, &q->ctx)) || !TEXT(d, "}"))
			return false;
		fc->n++;
	} while (TEXT(d, ","));
	return TEXT(d, "]}}") && d->p == d->end;
}

int tsec__fast_check_read(const char *p, size_t len, struct tsec__fast_check *fc,
			  struct tsec_request *r, size_t max)
{
	struct rd d = { (const unsigned char *)p, (const unsigned char *)p + len };
	struct tsec_str k, m;
	bool end, have_id = false, have_m = false, have_p = false;

	memset(fc, 0, sizeof(*fc));
	if (compact(&d, fc, r, max))
		return 1;
	memset(fc, 0, sizeof(*fc));
	d.p = (const unsigned char *)p;
	if (!eat(&d, '{'))
		return 0;
	for (bool first = true;; first = false) {
		if (!key(&d, first, &k, &end))
			return 0;
		if (end)
			break;
		if (IS(&k, "id") && !have_id) {
			have_id = true;
			ws(&d);
			if (d.p < d.end && *d.p == '"') {
				if (!string(&d, &fc->id_str))
					return 0;
				fc->id_kind = TSEC__FAST_ID_STRING;
			} else if (d.p < d.end && *d.p != 'n' && integer(&d, true, &fc->id_int)) {
				fc->id_kind = TSEC__FAST_ID_INT;
			} else if (literal(&d, "null", 4)) {
				fc->id_kind = TSEC__FAST_ID_NULL;
			} else {
				return 0;
			}
		} else if (IS(&k, "method") && !have_m) {
			have_m = true;
			if (!string(&d, &m) || !IS(&m, "check"))
				return 0;
		} else if (IS(&k, "params") && !have_p) {
			have_p = true;
			if (!params(&d, fc, r, max))
				return 0;
		} else {
			return 0;                /* principal, unknown, twice: jansson's */
		}
	}
	ws(&d);
	return d.p == d.end && have_m && have_p && fc->n > 0;
}

/* ---- any message, as the tree jansson would build ---- */

#define TREE_DEPTH 16

static json_t *tree_value(struct rd *d, int depth);

/* An object's members after its '{'; NULL for anything jansson should read. */
static json_t *tree_object(struct rd *d, int depth)
{
	json_t *o = json_object(), *v;
	struct tsec_str k;
	bool end;

	for (bool first = true; o; first = false) {
		if (!key(d, first, &k, &end))
			goto no;
		if (end)
			return o;
		/* A member twice: jansson refuses it (JSON_REJECT_DUPLICATES)
		 * and says so. */
		if (json_object_getn(o, k.ptr, k.len) || !(v = tree_value(d, depth + 1)))
			goto no;
		if (json_object_setn_new_nocheck(o, k.ptr, k.len, v))
			goto no;
	}
	return NULL;
no:
	json_decref(o);
	return NULL;
}

static json_t *tree_array(struct rd *d, int depth)
{
	json_t *a = json_array(), *v;

	if (!a)
		return NULL;
	if (eat(d, ']'))
		return a;
	do {
		if (!(v = tree_value(d, depth + 1)) || json_array_append_new(a, v))
			goto no;
	} while (eat(d, ','));
	if (eat(d, ']'))
		return a;
no:
	json_decref(a);
	return NULL;
}

static json_t *tree_value(struct rd *d, int depth)
{
	struct tsec_str s;
	int64_t i;

	if (depth > TREE_DEPTH)
		return NULL;
	ws(d);
	if (d->p >= d->end)
		return NULL;
	switch (*d->p) {
	case '{':
		d->p++;
		return tree_object(d, depth);
	case '[':
		d->p++;
		return tree_array(d, depth);
	case '"':
		/* Checked as UTF-8 without a NUL already: no second look. */
		return string(d, &s) ? json_stringn_nocheck(s.ptr, s.len) : NULL;
	case 't':
		return literal(d, "true", 4) ? json_true() : NULL;
	case 'f':
		return literal(d, "false", 5) ? json_false() : NULL;
	case 'n':
		return literal(d, "null", 4) ? json_null() : NULL;
	default:
		return integer(d, true, &i) ? json_integer((json_int_t)i) : NULL;
	}
}

json_t *tsec__fast_tree(const char *p, size_t len)
{
	struct rd d = { (const unsigned char *)p, (const unsigned char *)p + len };
	json_t *o;

	if (!eat(&d, '{') || !(o = tree_object(&d, 1)))
		return NULL;
	ws(&d);
	if (d.p != d.end) {
		json_decref(o);
		return NULL;
	}
	return o;
}
