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

__attribute__((hot))
bool tsec__domain_equal(const char *pat, size_t pn, const char *d, size_t dn)
{
	size_t i = 0;

	if (dn != pn || dn == 0)
		return false;
	if (dn >= 8) {
		for (; i + 8 < dn; i += 8)
			if (tsec__lower8(tsec__load8(d + i)) != tsec__load8(pat + i))
				return false;
		return tsec__lower8(tsec__load8(d + dn - 8)) == tsec__load8(pat + dn - 8);
	}
	for (; i < dn; i++)
		if (pat[i] != lower(d[i]))
			return false;
	return true;
}

int tsec__action_parse(const char *p, size_t n)
{
	/* From the one list of actions (tinysecurity/types.h). */
#define A(n, s, f) { sizeof(s) - 1, s },
	static const struct { uint8_t len; char name[15]; } tab[TSEC_ACTION__COUNT] = {
		TSEC_ACTIONS(A)
	};
#undef A
	int a;

	/* One candidate from the length and a letter, then one comparison
	 * (each family's shortest name first: the letters looked at are
	 * within it). */
	if (n < 9 || n > 14)
		return -1;
	if (p[0] == 'l') {
		if (n < 10)
			return -1;
		a = p[5] == 'a' ? TSEC_ACTION_LOCK_ACQUIRE
		  : n == 10 ? TSEC_ACTION_LOCK_RENEW : TSEC_ACTION_LOCK_RELEASE;
	} else if (p[0] == 'c') {
		switch (p[5]) {
		case 'p': a = TSEC_ACTION_CERT_PUBLISH; break;
		case 'l': a = TSEC_ACTION_CERT_LOAD; break;
		case 'e': a = TSEC_ACTION_CERT_EXISTS; break;
		case 'a': a = TSEC_ACTION_CERT_ARCHIVE; break;
		case 'o': a = TSEC_ACTION_CERT_OBTAIN; break;
		default: return -1;
		}
	} else {
		if (n < 12)
			return -1;
		switch (p[8]) {
		case 's': a = n == 13 ? TSEC_ACTION_STORAGE_STORE : TSEC_ACTION_STORAGE_STAT; break;
		case 'l': a = p[9] == 'o' ? TSEC_ACTION_STORAGE_LOAD : TSEC_ACTION_STORAGE_LIST; break;
		case 'e': a = TSEC_ACTION_STORAGE_EXISTS; break;
		case 'd': a = TSEC_ACTION_STORAGE_DELETE; break;
		case 'm': a = TSEC_ACTION_STORAGE_MOVE; break;
		default: return -1;
		}
	}
	return tab[a].len == n && tsec__bytes_eq(tab[a].name, p, n) ? a : -1;
}
