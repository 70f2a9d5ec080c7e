/*
 * The automaton of the exact policy comparison (diff.c): one NFA with a
 * branch for each language tracked, over the characters the patterns
 * name and one that none names.  Patterns share their prefixes (a memo
 * of the steps built), so "certificates/" and each '**' after it are one
 * state however many patterns pass through them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/policytest/diff_private.h"

enum { M_LIT = 1, M_STAR, M_SOME, M_JOIN, M_DSTAR };

static size_t memo_slot(const struct nfa *a, int from, int x, int tag)
{
	uint64_t h = ((uint64_t)(uint32_t)from * 0x9e3779b97f4a7c15ull) ^
		     ((uint64_t)(uint32_t)x * 0xc2b2ae3d27d4eb4full) ^ (uint64_t)tag;
	size_t i = (size_t)(h ^ (h >> 29)) & (a->mcap - 1);

	while (a->mv[i] >= 0 && !(a->mk[3 * i] == from && a->mk[3 * i + 1] == x &&
				  a->mk[3 * i + 2] == tag))
		i = (i + 1) & (a->mcap - 1);
	return i;
}

static int memo_get(const struct nfa *a, int from, int x, int tag)
{
	return a->mcap ? a->mv[memo_slot(a, from, x, tag)] : -1;
}

static void memo_put(struct nfa *a, int from, int x, int tag, int state)
{
	size_t i;

	if ((a->mn + 1) * 2 > a->mcap) {
		size_t cap = a->mcap ? 2 * a->mcap : 4096;
		int *k = malloc(3 * cap * sizeof(int)), *v = malloc(cap * sizeof(int));
		int *ok = a->mk, *ov = a->mv;
		size_t ocap = a->mcap;

		if (!k || !v) {
			free(k);
			free(v);
			return;      /* not remembered: only shared less */
		}
		memset(v, 0xff, cap * sizeof(int));
		a->mk = k;
		a->mv = v;
		a->mcap = cap;
		for (size_t j = 0; j < ocap; j++)
			if (ov[j] >= 0) {
				size_t t = memo_slot(a, ok[3 * j], ok[3 * j + 1], ok[3 * j + 2]);
				memcpy(&a->mk[3 * t], &ok[3 * j], 3 * sizeof(int));
				a->mv[t] = ov[j];
			}
		free(ok);
		free(ov);
	}
	i = memo_slot(a, from, x, tag);
	if (a->mv[i] < 0)
		a->mn++;
	a->mk[3 * i] = from;
	a->mk[3 * i + 1] = x;
	a->mk[3 * i + 2] = tag;
	a->mv[i] = state;
}

int tsec__dn_sym_find(const struct nfa *a, const char *c, size_t n)
{
	for (int i = 0; i < a->nsym; i++)
		if (strlen(a->sym[i]) == n && !memcmp(a->sym[i], c, n))
			return i;
	return -1;
}

int tsec__dn_sym_add(struct nfa *a, const char *c, size_t n)
{
	int i = tsec__dn_sym_find(a, c, n);

	if (i >= 0 || n == 0 || n > 4)
		return i;
	/* Never a character the key rules refuse. */
	if (n == 1 && ((unsigned char)c[0] < 0x20 || c[0] == 0x7f || c[0] == '\\' || c[0] == ':'))
		return -1;
	if (a->nsym == SYMS_MAX) {
		a->oom = true;
		return -1;
	}
	memcpy(a->sym[a->nsym], c, n);
	a->sym[a->nsym][n] = 0;
	return a->nsym++;
}

/* The length of the UTF-8 character at s (1 for a stray byte). */
static size_t ulen(const char *s)
{
	unsigned char c = (unsigned char)*s;
	size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;

	for (size_t i = 1; i < n; i++)
		if (!s[i])
			return i;
	return n;
}

void tsec__dn_syms_of(struct nfa *a, const char *s, bool both_cases)
{
	while (*s) {
		size_t n = ulen(s);

		if (!(n == 1 && (*s == '*' || *s == '/'))) {
			tsec__dn_sym_add(a, s, n);
			if (both_cases && n == 1 && ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) {
				char o = (char)(*s ^ 0x20);
				tsec__dn_sym_add(a, &o, 1);
			}
		}
		s += n;
	}
}

int tsec__dn_state_new(struct nfa *a)
{
	if (a->nstate == a->capstate) {
		int cap = a->capstate ? 2 * a->capstate : 1024;
		int *h = realloc(a->head, (size_t)cap * sizeof(int));
		int *ac = h ? realloc(a->accept, (size_t)cap * sizeof(int)) : NULL;

		if (h)
			a->head = h;
		if (!h || !ac) {
			a->oom = true;
			return 0;
		}
		a->accept = ac;
		a->capstate = cap;
	}
	a->head[a->nstate] = -1;
	a->accept[a->nstate] = -1;
	return a->nstate++;
}

static void edge(struct nfa *a, int from, int to, int kind, int sym)
{
	if (a->oom)
		return;
	if (a->nedge == a->capedge) {
		int cap = a->capedge ? 2 * a->capedge : 4096;
		int *t = realloc(a->eto, (size_t)cap * sizeof(int));
		int *nx = t ? realloc(a->enext, (size_t)cap * sizeof(int)) : NULL;
		int16_t *k = nx ? realloc(a->ekind, (size_t)cap * sizeof(int16_t)) : NULL;
		int16_t *sy = k ? realloc(a->esym, (size_t)cap * sizeof(int16_t)) : NULL;

		if (t)
			a->eto = t;
		if (nx)
			a->enext = nx;
		if (k)
			a->ekind = k;
		if (!sy) {
			a->oom = true;
			return;
		}
		a->esym = sy;
		a->capedge = cap;
	}
	a->eto[a->nedge] = to;
	a->ekind[a->nedge] = (int16_t)kind;
	a->esym[a->nedge] = (int16_t)sym;
	a->enext[a->nedge] = a->head[from];
	a->head[from] = a->nedge++;
}

/* The state after reading a literal symbol (shared). */
static int lit(struct nfa *a, int from, int sym)
{
	int y = memo_get(a, from, sym, M_LIT);

	if (y < 0) {
		y = tsec__dn_state_new(a);
		edge(a, from, y, K_SYM, sym);
		memo_put(a, from, sym, M_LIT, y);
	}
	return y;
}

/* Reads the characters of s[0..n) from `from` ('*': any run of
 * characters but '/', with star; letters either case with nocase); the
 * state reached. */
static int chars(struct nfa *a, int from, const char *s, size_t n, bool star, bool nocase)
{
	int cur = from;

	for (size_t i = 0; i < n;) {
		size_t l = ulen(s + i);

		if (star && s[i] == '*') {
			int x = memo_get(a, cur, 0, M_STAR);
			if (x < 0) {
				x = tsec__dn_state_new(a);
				edge(a, cur, x, K_EPS, 0);
				edge(a, x, x, K_SEG, 0);
				memo_put(a, cur, 0, M_STAR, x);
			}
			cur = x;
		} else if (!nocase) {
			cur = lit(a, cur, tsec__dn_sym_find(a, s + i, l));
		} else {
			int y = tsec__dn_state_new(a), c = tsec__dn_sym_find(a, s + i, l);
			edge(a, cur, y, K_SYM, c);
			if (nocase && l == 1 && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'))) {
				char o = (char)(s[i] ^ 0x20);
				edge(a, cur, y, K_SYM, tsec__dn_sym_find(a, &o, 1));
			}
			cur = y;
		}
		i += l;
	}
	return cur;
}

/* One or more characters of kind (a segment's, or a label's). */
static int some(struct nfa *a, int from, int kind)
{
	int x = memo_get(a, from, kind, M_SOME);

	if (x < 0) {
		x = tsec__dn_state_new(a);
		edge(a, from, x, kind, 0);
		edge(a, x, x, kind, 0);
		memo_put(a, from, kind, M_SOME, x);
	}
	return x;
}

/* One state reached from both x and y by epsilon (shared). */
static int join(struct nfa *a, int x, int y)
{
	int j = memo_get(a, x, y, M_JOIN);

	if (j < 0) {
		j = tsec__dn_state_new(a);
		edge(a, x, j, K_EPS, 0);
		edge(a, y, j, K_EPS, 0);
		memo_put(a, x, y, M_JOIN, j);
	}
	return j;
}

/* A resource pattern as language lang. */
void tsec__dn_resource(struct nfa *a, int start, const char *pat, int lang)
{
	int empty = start, full = -1;   /* at a segment's start: none read yet / some */
	const char *p = pat;

	while (*p == '/')
		p++;
	while (*p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		if (n == 2 && p[0] == '*' && p[1] == '*') {
			int loop = memo_get(a, empty, full, M_DSTAR);

			if (loop < 0) {
				loop = tsec__dn_state_new(a);
				if (full >= 0)
					edge(a, full, loop, K_EPS, 0);
				if (empty >= 0)
					edge(a, some(a, empty, K_SEG), loop, K_EPS, 0);
				edge(a, some(a, lit(a, loop, a->slash), K_SEG), loop, K_EPS, 0);
				memo_put(a, empty, full, M_DSTAR, loop);
			}
			full = loop;
		} else if (n > 0) {
			int e1 = empty >= 0 ? chars(a, empty, p, n, true, false) : -1;
			int e2 = full >= 0 ? chars(a, lit(a, full, a->slash), p, n, true, false) : -1;

			empty = -1;
			full = e1 >= 0 && e2 >= 0 ? join(a, e1, e2) : e1 >= 0 ? e1 : e2;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	if (empty == start) {
		/* Only "**" (or nothing): the root too. */
		int x = tsec__dn_state_new(a);
		edge(a, start, x, K_EPS, 0);
		a->accept[x] = lang;
	}
	if (full >= 0) {
		if (a->accept[full] >= 0 && a->accept[full] != lang) {
			/* Another pattern's end (spelt differently): one of its own. */
			int x = tsec__dn_state_new(a);
			edge(a, full, x, K_EPS, 0);
			full = x;
		}
		a->accept[full] = lang;
	}
}

/* From `at` (the domain segment read), the rest of a key: nothing, or
 * more segments; accepting as lang. */
static void key_rest(struct nfa *a, int at, int lang)
{
	int f = tsec__dn_state_new(a), g;

	a->accept[at] = lang;
	edge(a, at, f, K_SYM, a->slash);
	g = some(a, f, K_SEG);
	edge(a, g, f, K_SYM, a->slash);
	a->accept[g] = lang;
}

/* "certificates/<issuer>/" from start; the state reached. */
static int cert_prefix(struct nfa *a, int start)
{
	int x = chars(a, start, "certificates", 12, false, false), y = tsec__dn_state_new(a);

	edge(a, x, y, K_SYM, a->slash);
	x = some(a, y, K_SEG);
	y = tsec__dn_state_new(a);
	edge(a, x, y, K_SYM, a->slash);
	return y;
}

/* Labels of a domain pattern (lower case) from `at`. */
static int labels(struct nfa *a, int at, const char *d)
{
	while (*d) {
		const char *e = strchr(d, '.');
		size_t n = e ? (size_t)(e - d) : strlen(d);

		if (n == 1 && *d == '*')
			at = some(a, at, K_LABEL);
		else
			at = chars(a, at, d, n, false, true);
		d += n;
		if (*d == '.') {
			int x = tsec__dn_state_new(a);
			edge(a, at, x, K_SYM, a->dot);
			at = x;
			d++;
		}
	}
	return at;
}

/*
 * Keys whose domain (certificates/<issuer>/<domain>/...) matches d, as
 * the module reads it: label by label without case, "*" one non-empty
 * label; a segment wildcard_R read as "*" + ("." unless R starts with
 * one) + R.
 */
void tsec__dn_domain(struct nfa *a, int start, const char *d, int lang)
{
	int at = cert_prefix(a, start);

	key_rest(a, labels(a, at, d), lang);
	if (d[0] == '*' && d[1] == '.') {
		int w = chars(a, at, "wildcard_", 9, false, false), dot = tsec__dn_state_new(a);

		edge(a, w, dot, K_SYM, a->dot);
		edge(a, w, dot, K_EPS, 0);
		key_rest(a, labels(a, dot, d + 2), lang);
	}
}

/* Keys whose domain segment is in wildcard_ form (more than 9 bytes). */
void tsec__dn_wildform(struct nfa *a, int start, int lang)
{
	int at = cert_prefix(a, start);

	key_rest(a, some(a, chars(a, at, "wildcard_", 9, false, false), K_SEG), lang);
}


void tsec__dn_free(struct nfa *a)
{
	free(a->head);
	free(a->accept);
	free(a->eto);
	free(a->enext);
	free(a->ekind);
	free(a->esym);
	free(a->mk);
	free(a->mv);
}
