/*
 * Internal: the state of one evaluation's walk, shared by eval.c (the
 * decision, the hot path) and explain.c (Evaluate's report and why-not).
 */
#ifndef TSEC_MODULE_WALK_H
#define TSEC_MODULE_WALK_H

#include "module/module_private.h"

#define HIT_MAX 16                /* distinct rules kept per effect */
#define ROLES_MAX 32
#define NAME_MAX_LEN 255

struct hits {
	uint32_t rule[3][HIT_MAX];   /* by effect - 1 */
	uint8_t n[3];
	uint8_t more[3];
};

struct walk {
	const struct tsec__policy *pol;
	struct tsec__key *key;       /* derived on first need (domain()) */
	uint64_t hashed;             /* bit i: seghash[i] is computed */
	uint64_t seghash[TSEC_KEY_SEGMENTS];
	const struct tsec_request *req;
	unsigned action;
	const char *domain;          /* the key's domain, once needed (domain()) */
	size_t domain_len;
	bool have_domain;
	struct hits *h;
	struct tsec_report *rep;     /* NULL for Check */
	struct tsec__certcache *cache;
	struct tsec__cert_facts *facts; /* parsed on first need */
	bool have_facts;
	char dom[256];               /* a wildcard domain, read back */
	const char *cond_error;      /* first condition that failed to evaluate, */
	uint32_t cond_rule;          /* of the most binding effect that had one */
	unsigned cond_effect;        /* that effect - 1, or 3 */
	/* Check only: the most binding effect (- 1) recorded so far, 3 for
	 * none.  Once a floor or deny applies, no allow can change the
	 * decision, so Check stops reading rules of a later effect. */
	unsigned best;
	/* What a node's action bits must hold for the walk to go in: the action's
	 * bit, or its floor-and-deny bit once best is a floor or deny. */
	uint32_t amask;
	/* Evaluate only: which rules were counted, once the report's list of
	 * TSEC_REPORT_MATCHES is full (see report_match). */
	uint8_t **seen;
	uint32_t listed[TSEC_REPORT_MATCHES];
	/* Evaluate with explain only (last: Check's fields keep their places). */
	struct tsec_explain *ex;     /* why-not, or NULL */
	uint32_t end;                /* 1 while walking a move's destination */
};

/* The request's certificate, parsed (or found in the cache) once. */
static const struct tsec__cert_facts *facts(struct walk *w)
{
	if (!w->have_facts) {
		const struct tsec_str *pem = &w->req->ctx.cert_pem;
		tsec__cert_facts_get(w->cache, w->rep == NULL, pem->ptr, pem->len,
				     w->facts);
		w->have_facts = true;
	}
	return w->facts;
}

/*
 * The key's domain, read the first time a condition needs it: as a slice
 * of the key, or ("wildcard_" read back as "*.") in w->dom.
 */
static inline void domain(struct walk *w)
{
	struct tsec__key *k = w->key;

	if (w->have_domain)
		return;
	w->have_domain = true;
	tsec__key_derive(k);
	if (k->domain_seg < 0) {
		w->domain_len = 0;
	} else if (!k->domain_wild) {
		w->domain = k->base + k->off[k->domain_seg];
		w->domain_len = k->len[k->domain_seg];
	} else {
		w->domain_len = tsec__key_domain(k, w->dom, sizeof(w->dom));
		w->domain = w->dom;
	}
}

/* explain.c: Evaluate's report and why-not, called only when there is a
 * report to fill (never on Check's path). */
void tsec__report_error(struct tsec_report *rep, const struct tsec__rule *r,
			 const char *why);
void tsec__why_not(struct walk *w, const struct tsec__rule *r, char *out, size_t cap);
void tsec__explain_miss(struct walk *w, const struct tsec__rule *r);
void tsec__explain_cert(struct walk *w);

#endif
