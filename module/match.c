/*
 * Matching primitives: segment globs, certmagic domain wildcards, action
 * names.  All pure and allocation-free.
 */
#include <string.h>

#include "module/module_private.h"

bool tsec__glob_segment(const char *pat, size_t pn, const char *s, size_t sn)
{
	size_t pi = 0, si = 0, star = (size_t)-1, mark = 0;

	/*
	 * Classic greedy match with one backtrack point: on a mismatch after
	 * a '*', let that '*' swallow one more byte.  O(pn * sn) worst case,
	 * both bounded by the 255-byte segment limit.
	 */
	while (si < sn) {
		if (pi < pn && pat[pi] == '*') {
			star = pi++;
			mark = si;
		} else if (pi < pn && pat[pi] == s[si]) {
			pi++;
			si++;
		} else if (star != (size_t)-1) {
			pi = star + 1;
			si = ++mark;
		} else {
			return false;
		}
	}
	while (pi < pn && pat[pi] == '*')
		pi++;
	return pi == pn;
}

static inline char lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
}

__attribute__((hot))
bool tsec__domain_match(const char *pat, size_t pn, const char *d, size_t dn)
{
	size_t pi = 0, di = 0;

	if (dn == 0)
		return false;
	/* Walk label by label; label counts must agree. */
	for (;;) {
		size_t pe = pi, de = di;

		while (pe < pn && pat[pe] != '.')
			pe++;
		while (de < dn && d[de] != '.')
			de++;
		if (pe - pi == 1 && pat[pi] == '*') {
			if (de == di)
				return false; /* "*" needs a non-empty label */
		} else {
			if (pe - pi != de - di)
				return false;
			for (size_t i = 0; i < pe - pi; i++)
				if (pat[pi + i] != lower(d[di + i]))
					return false;
		}
		if (pe == pn || de == dn)
			return pe == pn && de == dn;
		pi = pe + 1;
		di = de + 1;
	}
}

int tsec__action_parse(const char *p, size_t n)
{
	for (unsigned a = 0; a < TSEC_ACTION__COUNT; a++) {
		const char *name = tsec_action_name(a);
		if (strlen(name) == n && memcmp(name, p, n) == 0)
			return (int)a;
	}
	return -1;
}
