/*
 * Where in a JSON text a problem is (where.h).  The walk below reads only
 * enough punctuation to follow a pointer; the text was parsed by jansson
 * already, so a walk that meets something odd stops where it is and
 * names the deepest part it reached.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/where.h"

void tsec__text_pos(const char *text, size_t len, size_t off, int *line, int *col)
{
	int l = 1, c = 1;

	for (size_t i = 0; i < off && i < len; i++) {
		unsigned char b = (unsigned char)text[i];

		if (b == '\n') {
			l++;
			c = 1;
		} else if ((b & 0xC0) != 0x80) {
			c++;
		}
	}
	*line = l;
	*col = c;
}

static const char *ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Past the string at p (at its '"'); NULL if unterminated. */
static const char *past_string(const char *p, const char *e)
{
	for (p++; p < e && *p != '"'; p++)
		if (*p == '\\')
			p++;
	return p < e ? p + 1 : NULL;
}

const char *tsec__json_past(const char *p, const char *end, size_t *items)
{
	int depth = 0;

	do {
		if (p >= end)
			return NULL;
		if (*p == '"') {
			if (!(p = past_string(p, end)))
				return NULL;
		} else if (*p == '[' || *p == '{') {
			/* An object directly inside a top-level array. */
			if (depth == 1 && *p == '{' && items)
				(*items)++;
			depth++;
			p++;
		} else if (*p == ']' || *p == '}') {
			if (--depth < 0)
				return NULL;
			p++;
		} else if (depth == 0) {
			while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' &&
			       *p != '\t' && *p != '\r' && *p != '\n')
				p++;
		} else {
			p++;
		}
	} while (depth > 0);
	return p;
}

static const char *past_value(const char *p, const char *e)
{
	return tsec__json_past(p, e, NULL);
}

/*
 * Does the key string k[0..kn) (its raw bytes between the quotes) equal
 * the pointer segment s[0..sn) (~0 is '~', ~1 is '/')?  Keys with
 * escapes other than \" \\ \/ never match: the walk then stops at the
 * object, which is near enough.
 */
static bool key_is(const char *k, size_t kn, const char *s, size_t sn)
{
	size_t i = 0, j = 0;

	while (i < kn && j < sn) {
		char a = k[i++], b = s[j++];

		if (a == '\\') {
			if (i >= kn || !strchr("\"\\/", k[i]))
				return false;
			a = k[i++];
		}
		if (b == '~' && j < sn && (s[j] == '0' || s[j] == '1'))
			b = s[j++] == '0' ? '~' : '/';
		if (a != b)
			return false;
	}
	return i == kn && j == sn;
}

/* The member named s[0..sn) of the object at *p: its key's offset in
 * *at and its value in *p; false if there is none. */
static bool member(const char **p, const char *e, const char *s, size_t sn, const char **at)
{
	const char *q = ws(*p + 1, e), *k, *ke;

	while (q < e && *q == '"') {
		k = q;
		if (!(ke = past_string(q, e)))
			return false;
		q = ws(ke, e);
		if (q >= e || *q != ':')
			return false;
		q = ws(q + 1, e);
		if (key_is(k + 1, (size_t)(ke - k - 2), s, sn)) {
			*at = k;
			*p = q;
			return true;
		}
		if (!(q = past_value(q, e)))
			return false;
		q = ws(q, e);
		if (q >= e || *q != ',')
			return false;
		q = ws(q + 1, e);
	}
	return false;
}

/* Element s[0..sn) (a decimal index) of the array at *p, as member(). */
static bool element(const char **p, const char *e, const char *s, size_t sn)
{
	const char *q = ws(*p + 1, e);
	size_t idx = 0;

	if (sn == 0 || sn > 9)
		return false;
	for (size_t i = 0; i < sn; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		idx = idx * 10 + (size_t)(s[i] - '0');
	}
	for (size_t i = 0; q < e && *q != ']'; i++) {
		if (i == idx) {
			*p = q;
			return true;
		}
		if (!(q = past_value(q, e)))
			return false;
		q = ws(q, e);
		if (q >= e || *q != ',')
			return false;
		q = ws(q + 1, e);
	}
	return false;
}

size_t tsec__pointer_at(const char *text, size_t len, const char *ptr)
{
	const char *e = text + len, *p = ws(text, e), *best = p, *s = ptr;

	if (!ptr || p >= e)
		return 0;
	while (*s == '/') {
		size_t sn = strcspn(s + 1, "/");
		const char *at = NULL;

		if (p < e && *p == '{' && member(&p, e, s + 1, sn, &at))
			best = at;
		else if (p < e && *p == '[' && element(&p, e, s + 1, sn))
			best = p;
		else
			break;
		s += 1 + sn;
	}
	return (size_t)(best - text);
}

void tsec__error_pos(const char *text, size_t len, const char *where, const char *msg,
		     int *line, int *col, const char **rest)
{
	int n = 0;

	*rest = msg;
	if (sscanf(msg, "JSON error at line %d column %d: %n", line, col, &n) == 2 && n > 0) {
		*rest = msg + n;
		return;
	}
	tsec__text_pos(text, len, where && where[0] ? tsec__pointer_at(text, len, where) : 0,
		       line, col);
}

void tsec__error_say(char *out, size_t n, const char *path, const char *text, size_t len,
		     const char *where, const char *msg)
{
	const char *rest;
	int line, col;

	tsec__error_pos(text, len, where, msg, &line, &col, &rest);
	snprintf(out, n, "%s:%d:%d: %s%s%s", path, line, col, where ? where : "",
		 where && where[0] ? ": " : "", rest);
}

void tsec__json_error_say(char *out, size_t n, const char *path, const json_error_t *je)
{
	if (je->line >= 1)
		snprintf(out, n, "%s:%d:%d: %s", path, je->line, je->column > 1 ? je->column : 1,
			 je->text);
	else
		snprintf(out, n, "%s: %s", path, je->text);
}
