/* Internal: the automaton of broker/policytest/diff.c (diff_nfa.c). */
#ifndef TSEC_BROKER_POLICYTEST_DIFF_PRIVATE_H
#define TSEC_BROKER_POLICYTEST_DIFF_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum { K_SYM, K_SEG, K_LABEL, K_EPS };

#define SYMS_MAX 256

struct nfa {
	/* Symbols: UTF-8 characters, at most 4 bytes. */
	char sym[SYMS_MAX][5];
	int nsym, slash, dot;
	/* States and edges. */
	int *head, *accept;          /* accept: the language, or -1 */
	int nstate, capstate;
	int *eto, *enext;
	int16_t *ekind, *esym;
	int nedge, capedge;
	int nlang;
	bool oom;
	/* Steps already built, so that patterns share their prefixes (one
	 * state for "certificates/" and for each '**' after it, however
	 * many patterns go through them): (from, x, tag) -> state. */
	int *mk, *mv;
	size_t mcap, mn;
};

/* The symbol c[0..n), or -1; added (once) unless the key rules refuse
 * it; every character of s (both cases of letters with both_cases). */
int tsec__dn_sym_find(const struct nfa *a, const char *c, size_t n);
int tsec__dn_sym_add(struct nfa *a, const char *c, size_t n);
void tsec__dn_syms_of(struct nfa *a, const char *s, bool both_cases);
/* A new state (0 and a->oom set when out of memory). */
int tsec__dn_state_new(struct nfa *a);
/* The branches of each language from start: a resource pattern; keys
 * whose domain matches d (lower case); keys whose domain segment is in
 * wildcard_ form. */
void tsec__dn_resource(struct nfa *a, int start, const char *pat, int lang);
void tsec__dn_domain(struct nfa *a, int start, const char *d, int lang);
void tsec__dn_wildform(struct nfa *a, int start, int lang);
void tsec__dn_free(struct nfa *a);

/*
 * The certificates the cert conditions conds (their "cert" objects) tell
 * apart for key, as PEM borrowed from cache (made once each per cache):
 * at most max, into out; their count.
 */
size_t tsec__dn_certs(json_t *cache, int64_t now, const char *key, json_t *conds,
		      const char **out, size_t max);

#endif
