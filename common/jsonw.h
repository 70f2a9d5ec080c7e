/*
 * Internal: a JSON text writer for the broker's hot replies and its
 * decision log.  jansson parses everything we read; this only writes, in
 * one growing buffer, without building a tree: a Check's reply and its
 * log lines cost a few thousand instructions instead of a hundred
 * thousand (docs/performance.md).  Strings are escaped as jansson
 * escapes them (\" \\ \b \f \n \r \t, other controls \u00XX), plus DEL and
 * the C1 controls as \u00XX; invalid UTF-8 becomes \uFFFD, so no byte of a
 * caller's reaches the text unescaped.
 */
#ifndef TSEC_COMMON_JSONW_H
#define TSEC_COMMON_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct tsec__jw {
	char *buf;
	size_t len, cap;
	bool failed;                 /* out of memory: the text is incomplete */
	bool borrowed;               /* buf is the caller's (tsec__jw_init_on) */
};

/* An empty writer (no allocation until the first byte). */
void tsec__jw_init(struct tsec__jw *w);
/* Empties w for the next text, keeping its buffer (one writer reused
 * call after call allocates once); a buffer grown past 64 KiB is let go. */
void tsec__jw_reset(struct tsec__jw *w);

/* A writer into the caller's buf[0..cap) (a stack buffer for a line):
 * no allocation unless the text outgrows it, when it moves to the heap.
 * tsec__jw_free frees only what it allocated. */
void tsec__jw_init_on(struct tsec__jw *w, char *buf, size_t cap);

/* Appends n bytes as they are (punctuation, or JSON text made elsewhere).
 * Inline, so that a literal's copy is a few moves, not a call. */
void tsec__jw_grow(struct tsec__jw *w, const char *s, size_t n);
static inline void tsec__jw_raw(struct tsec__jw *w, const char *s, size_t n)
{
	if (n < w->cap - w->len) {
		char *d = w->buf + w->len;

		/* A short run of unknown length (a name, a number, a key) in
		 * two overlapping moves, not a call to memcpy. */
		if (__builtin_constant_p(n) || n > 16) {
			memcpy(d, s, n);
		} else if (n >= 8) {
			uint64_t a, b;

			memcpy(&a, s, 8);
			memcpy(&b, s + n - 8, 8);
			memcpy(d, &a, 8);
			memcpy(d + n - 8, &b, 8);
		} else if (n >= 4) {
			uint32_t a, b;

			memcpy(&a, s, 4);
			memcpy(&b, s + n - 4, 4);
			memcpy(d, &a, 4);
			memcpy(d + n - 4, &b, 4);
		} else if (n) {
			d[0] = s[0];
			d[n >> 1] = s[n >> 1];
			d[n - 1] = s[n - 1];
		}
		w->len += n;
		return;
	}
	tsec__jw_grow(w, s, n);
}
/* lit must be a string literal ("" lit "" will not compile otherwise:
 * sizeof of a pointer, from a ?: of two literals, wrote 8 bytes). */
#define TSEC__JW_LIT(w, lit) tsec__jw_raw((w), "" lit "", sizeof("" lit "") - 1)

/* Appends s[0..n) as a JSON string, quotes included. */
void tsec__jw_str(struct tsec__jw *w, const char *s, size_t n);

/* Appends a NUL-terminated string as a JSON string (NULL as ""). */
void tsec__jw_cstr(struct tsec__jw *w, const char *s);

void tsec__jw_int(struct tsec__jw *w, int64_t v);
void tsec__jw_uint(struct tsec__jw *w, uint64_t v);
void tsec__jw_bool(struct tsec__jw *w, bool v);

/*
 * The text, NUL-terminated, for the caller to free (*len its length when
 * len is not NULL); NULL if memory ran out.  The writer is empty after.
 */
char *tsec__jw_take(struct tsec__jw *w, size_t *len);

/* Drops what was written. */
void tsec__jw_free(struct tsec__jw *w);

#endif
