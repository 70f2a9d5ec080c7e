/*
 * Evaluation of one request against a compiled policy.
 *
 * Hot path: no allocation, no lock, no logging, no string building except
 * into the caller's output.  The walk state lives on the stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "module/module_private.h"


#include "module/walk.h"

/*
 * Certificate conditions: 1 hold, 0 do not, -1 cannot be evaluated (*why
 * says why).  They constrain only requests that carry a PEM.
 */
static int cert_applies(struct walk *w, const struct tsec__rule *r,
			const char **why)
{
	const struct tsec_context *ctx = &w->req->ctx;
	const struct tsec__cert_facts *f;

	if (!(ctx->has & TSEC_CTX_CERT_PEM) || !r->cert)
		return 1;
	f = facts(w);
	if (!f->ok) {
		*why = f->error;
		return -1;
	}
	if (r->cert & TSEC__CERT_SAN) {
		bool covered = false;
		domain(w);
		if (!w->domain_len) {
			*why = "san_covers_domain: the key names no domain";
			return -1;
		}
		for (uint32_t i = 0; i < f->nsans && !covered; i++)
			covered = tsec__domain_match(f->names + f->san_off[i],
						     f->san_len[i], w->domain,
						     w->domain_len);
		if (!covered)
			return 0;
	}
	if (r->cert & TSEC__CERT_REMAINING) {
		int64_t now = (ctx->has & TSEC_CTX_NOW) ? ctx->now : (int64_t)time(NULL), left;
		/* Overflow-safe: any now and any not_after, saturating. */
		if (__builtin_sub_overflow(f->not_after, now, &left))
			left = now > 0 ? INT64_MIN : INT64_MAX;
		if (left < 0 || (uint64_t)left < r->min_remaining_s)
			return 0;
	}
	if ((r->cert & TSEC__CERT_RSA_BITS) && f->key_type == TSEC__KEYTYPE_RSA &&
	    f->rsa_bits < r->min_rsa_bits)
		return 0;
	if ((r->cert & TSEC__CERT_KEY_TYPES) && !(r->key_types & (1u << f->key_type)))
		return 0;
	return 1;
}

/*
 * Whether the request's principal, or one of its roles, is one a floor
 * or deny rule excepts ("except"): the rule does not bind it.
 */
bool tsec__excepted(const struct tsec__policy *pol, const struct tsec__rule *r,
		    const struct tsec_request *req)
{
	for (uint32_t i = 0; i < r->exc_count; i++) {
		const struct tsec__dom *x = &pol->excs[r->exc_first + i];
		const char *name = pol->arena + x->off;

		if (!x->star) {
			if (req->principal.len == x->len && !memcmp(req->principal.ptr, name, x->len))
				return true;
			continue;
		}
		for (uint32_t k = 0; k < req->nroles; k++) {
			const char *rp = req->roles[k].ptr;
			size_t rn = req->roles[k].len;

			if (rn > 5 && !memcmp(rp, "role:", 5)) {
				rp += 5;
				rn -= 5;
			}
			if (rn == x->len && !memcmp(rp, name, rn))
				return true;
		}
	}
	return false;
}

/*
 * Whether rule r applies to the request: 1 yes, 0 no, -1 a condition
 * cannot be evaluated (*why says which).
 */
static int rule_applies(struct walk *w, const struct tsec__rule *r,
			const char **why)
{
	if (!(r->actions & (1u << w->action)))
		return 0;
	if (r->exc_count && tsec__excepted(w->pol, r, w->req))
		return 0;
	if (r->dom_count) {
		bool any = false;
		domain(w);
		if (!w->domain_len)
			return 0;
		for (uint32_t i = 0; i < r->dom_count && !any; i++) {
			const struct tsec__dom *d = &w->pol->doms[r->dom_first + i];
			any = tsec__dom_match(w->pol->arena, d, w->domain, w->domain_len);
		}
		if (!any)
			return 0;
	}
	if (r->when) {
		if (tsec__when_fails(&w->req->ctx, r))
			return 0;
		if (r->when & TSEC__WHEN_CERT)
			return cert_applies(w, r, why);
	}
	return 1;
}

/*
 * Counts a matching rule once, however many paths reach it.  The first
 * TSEC_REPORT_MATCHES are listed and compared directly.  Past them, a
 * bitmap of the policy's rules says which were counted: Evaluate (the
 * diagnostic path, never Check) allocates it then, because a policy may
 * have millions of rules and a report no room for them; without memory
 * the count goes on without it and may count a rule twice.
 */
static inline __attribute__((always_inline))
void report_match(struct walk *w, const struct tsec__rule *r)
{
	struct tsec_report *rep = w->rep;
	uint32_t ri = (uint32_t)(r - w->pol->rules);
	uint8_t *seen = *w->seen;

	if (seen) {
		if (seen[ri / 8] & (1u << (ri % 8)))
			return;
		seen[ri / 8] |= (uint8_t)(1u << (ri % 8));
		rep->nmatched_total++;
		return;
	}
	for (uint32_t i = 0; i < rep->nmatched; i++)
		if (w->listed[i] == ri)
			return;
	rep->nmatched_total++;
	if (rep->nmatched < TSEC_REPORT_MATCHES) {
		memcpy(rep->matched[rep->nmatched].id, r->id, TSEC_ID_MAX);
		rep->matched[rep->nmatched].effect = r->effect;
		w->listed[rep->nmatched++] = ri;
		return;
	}
	/* The list is full: from here on, the bitmap. */
	if ((seen = calloc((size_t)w->pol->nrules / 8 + 1, 1))) {
		for (uint32_t i = 0; i < rep->nmatched; i++)
			seen[w->listed[i] / 8] |= (uint8_t)(1u << (w->listed[i] % 8));
		seen[ri / 8] |= (uint8_t)(1u << (ri % 8));
		*w->seen = seen;
	}
}

/* Records rule ri, of effect e + 1, which applies; returns true. */
static inline bool record(struct walk *w, uint32_t ri, unsigned e)
{
	struct hits *h = w->h;

	for (unsigned i = 0; i < h->n[e]; i++)
		if (h->rule[e][i] == ri)
			return true;
	if (h->n[e] < HIT_MAX)
		h->rule[e][h->n[e]++] = ri;
	else
		h->more[e] = 1;
	if (w->rep)
		report_match(w, &w->pol->rules[ri]);
	else if (e < w->best) {
		w->best = e;
		if (e != TSEC_EFFECT_ALLOW - 1u)
			w->amask = (1u << w->action) << TSEC__ACTS_FD_SHIFT;
	}
	return true;
}

/* Records rule ri if it applies; returns whether it did. */
__attribute__((hot))
static bool hit(struct walk *w, uint32_t ri)
{
	const struct tsec__rule *r = &w->pol->rules[ri];
	unsigned e = r->effect - 1u;
	const char *why = NULL;
	int a = rule_applies(w, r, &why);

	if (a == 0) {
		if (w->ex)
			tsec__explain_miss(w, r);
		return false;
	}
	if (a < 0) {
		/*
		 * Fail closed: an unevaluable condition never lets an allow
		 * match and always lets a floor or deny match.
		 */
		if (e < w->cond_effect) {
			w->cond_error = why;
			w->cond_rule = ri;
			w->cond_effect = e;
		}
		if (w->rep)
			tsec__report_error(w->rep, r, why);
		if (r->effect == TSEC_EFFECT_ALLOW)
			return false;
	}
	return record(w, ri, e);
}

/*
 * The rules ending at a node.  Its entries run by effect, each run by
 * rule order (tables.c), so Check has what a decision can show once a
 * run gave HIT_MAX rules that apply: the rest of that run only sets
 * "more", and the walk skips to the next run.  A request's cost is then
 * bounded by what it can match, not by how many rules share a node.
 * Evaluate reports every match, so it reads every entry.
 */
__attribute__((hot))
static void hit_node(struct walk *w, const struct tsec__node *n)
{
	const struct tsec__policy *pol = w->pol;
	unsigned got[3] = { 0, 0, 0 }, abit = 1u << w->action;

	for (uint32_t t = n->terms; t;) {
		const struct tsec__term *term = &pol->terms[t];
		unsigned e = term->effect - 1u;
		if (e > w->best)
			break;      /* Check: a floor or deny applies; see struct walk */
		if (!(term->actions & abit)) {
			t = term->next;  /* another action's rule: it did not match */
			continue;
		}
		if (!w->rep && got[e] >= HIT_MAX) {
			w->h->more[e] = 1;
			t = term->skip;
			continue;
		}
		if (term->plain ? record(w, term->rule, e) : hit(w, term->rule))
			got[e]++;
		t = term->next;
	}
}

static void walk(struct walk *w, uint32_t node, unsigned i);

/* The child of `node` along the key's segment i (hashed once, when a
 * trie first asks), or 0. */
static inline uint32_t lit_child(struct walk *w, uint32_t node, unsigned i)
{
	const struct tsec__key *k = w->key;
	const char *s = k->base + k->off[i];
	size_t l = k->len[i];

	if (!(w->hashed & (1ull << i))) {
		w->seghash[i] = tsec__hash(w->pol->seed, s, l);
		w->hashed |= 1ull << i;
	}
	return tsec__edge_find(w->pol, node, w->seghash[i], s, l);
}

/*
 * The globs of index ix (under node) that segment i, s[0..l), meets:
 * one lookup per distinct length of their fixed parts, shortest first.
 */
__attribute__((noinline))
static void walk_index(struct walk *w, uint32_t node, const struct tsec__glob *ix,
		       unsigned i, const char *s, size_t l)
{
	const struct tsec__policy *pol = w->pol;
	const uint8_t *lens = (const uint8_t *)pol->arena + ix->off;
	bool prefix = ix->kind == TSEC__GLOB_PREFIXES;
	uint32_t ns = node | (prefix ? TSEC__NS_PREFIX : TSEC__NS_SUFFIX);

	for (uint32_t k = 0; k < ix->len && lens[k] <= l; k++) {
		const char *p = prefix ? s : s + l - lens[k];
		uint32_t g = tsec__edge_find(pol, ns, tsec__hash(pol->seed, p, lens[k]),
					     p, lens[k]);
		const struct tsec__glob *gl = &pol->globs[g];
		if (!g)
			continue;
		if (!gl->leaf)
			walk(w, gl->child, i + 1);
		else if (i + 1 == w->key->nseg)
			hit_node(w, &pol->nodes[gl->child]);
	}
}

/* The rules at a node, if it has any. */
#define HIT_NODE(w, n) do { if ((n)->terms) hit_node((w), (n)); } while (0)

__attribute__((hot))
static void walk(struct walk *w, uint32_t node, unsigned i)
{
	const struct tsec__policy *pol = w->pol;
	const struct tsec__node *n = &pol->nodes[node];
	const struct tsec__key *k = w->key;
	unsigned nseg = k->nseg;

	/* No rule for this action at or below this node: nothing to find. */
	if (!(n->bits & w->amask))
		return;
	/*
	 * Down a run of nodes whose only way on is one literal table or one
	 * glob: a loop, not calls (the order of visits does not change).
	 */
	while (i < nseg && (n->shape & (TSEC__SHAPE_LITS | TSEC__SHAPE_GLOB1))) {
		if (n->shape & TSEC__SHAPE_LITS) {
			node = lit_child(w, node, i);
		} else {
			const struct tsec__glob *gl = &pol->globs[n->globs];
			node = tsec__glob_edge_match(pol->arena, gl, k->base + k->off[i],
						     k->len[i]) ? gl->child : 0;
		}
		if (!node)
			return;
		n = &pol->nodes[node];
		if (!(n->bits & w->amask))
			return;
		i++;
	}
	if (i == nseg) {
		HIT_NODE(w, n);
	} else {
		const char *s = k->base + k->off[i];
		size_t l = k->len[i];
		uint32_t c;

		if (n->lits && (c = lit_child(w, node, i)))
			walk(w, c, i + 1);
		for (uint32_t g = n->globs; g; g = pol->globs[g].next) {
			const struct tsec__glob *gl = &pol->globs[g];
			if (gl->leaf) {
				/* Only rules there: only the last segment reaches them. */
				if (gl->leaf == TSEC__GLOB_LEAF_INDEX)
					walk_index(w, node, gl, i, s, l);
				else if (i + 1 == nseg && tsec__glob_edge_match(pol->arena, gl, s, l))
					hit_node(w, &pol->nodes[gl->child]);
			} else if (tsec__glob_edge_match(pol->arena, gl, s, l)) {
				walk(w, gl->child, i + 1);
			}
		}
	}
	if (n->dstar) {
		const struct tsec__node *d = &pol->nodes[n->dstar];
		unsigned j = i;

		if (d->shape & TSEC__SHAPE_LEAF) {
			/* Rules only: "**" reaches them at the key's end. */
			HIT_NODE(w, d);
		} else if (d->shape & TSEC__SHAPE_TAIL) {
			/* Leaves behind globs: the last segment, then the end. */
			if (j < nseg) {
				const char *s = k->base + k->off[nseg - 1];
				size_t l = k->len[nseg - 1];
				for (uint32_t g = d->globs; g; g = pol->globs[g].next) {
					const struct tsec__glob *gl = &pol->globs[g];
					if (gl->leaf == TSEC__GLOB_LEAF_INDEX)
						walk_index(w, n->dstar, gl, nseg - 1, s, l);
					else if (tsec__glob_edge_match(pol->arena, gl, s, l))
						hit_node(w, &pol->nodes[gl->child]);
				}
			}
			HIT_NODE(w, d);
		} else {
			for (; j <= nseg; j++)
				walk(w, n->dstar, j);
		}
	}
}

static bool strip_role(struct tsec_str *r)
{
	if (r->len >= 5 && memcmp(r->ptr, "role:", 5) == 0) {
		r->ptr += 5;
		r->len -= 5;
	}
	return r->len > 0 && r->len <= NAME_MAX_LEN;
}

/*
 * Checks a principal or role name (no space, control or DEL; 1..255
 * bytes) and hashes it as tsec__hash does, in one pass of eight bytes a
 * step.
 */
static inline bool name_scan(const char *p, size_t n, uint64_t seed, uint64_t *hash)
{
	uint64_t h, bad = 0, x;

	if (!p || n == 0 || n > NAME_MAX_LEN)
		return false;
	h = tsec__hash_begin(seed, n);
	if (n < 8) {
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)p[i];
			if (c <= 0x20 || c == 0x7f)
				return false;
		}
		*hash = tsec__hash_step(h, tsec__hash_short(p, n));
		return true;
	}
	for (size_t i = 0; i + 8 < n; i += 8) {
		x = tsec__load8(p + i);
		bad |= tsec__ctl_bytes(x);
		h = tsec__hash_step(h, x);
	}
	x = tsec__load8(p + n - 8);
	bad |= tsec__ctl_bytes(x);
	*hash = tsec__hash_step(h, x);
	return !bad;
}

/*
 * Runs the walk for one key over the request's roots: the principal's
 * trie, each role's, then "*" (decide() found them once per request).
 */
__attribute__((hot))
static void match_key(struct walk *w, struct tsec__key *k,
		      const uint32_t *roots, unsigned nroots)
{
	const struct tsec__policy *pol = w->pol;

	w->key = k;
	w->hashed = 0;
	w->have_domain = false;
	w->domain = NULL;
	w->domain_len = 0;
	for (unsigned r = 0; r < nroots; r++) {
		walk(w, roots[r], 0);
		/* The tries of the rules this root shares. */
		for (uint32_t j = pol->nodes[roots[r]].jumps; j; j = pol->jumps[j].next)
			walk(w, pol->jumps[j].target, 0);
	}
}

static void invalid(struct tsec_decision *out, const char *field,
		    const char *detail)
{
	out->allow = 0;
	out->status = TSEC_STATUS_INVALID;
	out->nrules = 0;
	out->flags = 0;
	snprintf(out->field, sizeof(out->field), "%s", field);
	snprintf(out->detail, sizeof(out->detail), "%s: %s", field, detail);
}

/*
 * A batch's caller, found once: the roots of the principal and roles the
 * last request named, reused while the next names the same ones (every
 * wire batch does: one authenticated caller).
 */
struct who {
	bool valid;
	struct tsec_str principal;
	const struct tsec_str *roles;
	uint32_t nroles;
	unsigned nroots;
	uint32_t roots[ROLES_MAX + 2];
};

static bool str_same(const struct tsec_str *a, const struct tsec_str *b)
{
	return a->len == b->len && b->ptr && (a->ptr == b->ptr || !memcmp(a->ptr, b->ptr, a->len));
}

/* Whether req names the principal and roles w found roots for. */
static bool same_who(const struct who *w, const struct tsec_request *req)
{
	if (!w || !w->valid || w->nroles != req->nroles || !str_same(&w->principal, &req->principal))
		return false;
	if (w->roles == req->roles)
		return true;
	if (!req->roles)
		return false;
	for (uint32_t i = 0; i < req->nroles; i++)
		if (!str_same(&w->roles[i], &req->roles[i]))
			return false;
	return true;
}

/*
 * Validates everything but the keys and finds the request's roots (the
 * principal's, each role's, then "*"; one hashing pass per name) into
 * roots, which is who->roots when who is given: there they are kept for
 * the next request that names the same caller.  Check (rep NULL) puts
 * "*" first: floors are usually there, and once one applies a Check
 * skips the callers' allows (struct walk); Evaluate reports in the
 * order above.
 * Returns the action or -1 after writing an INVALID decision.
 */
static int validate(const struct tsec__policy *pol, const struct tsec_request *req,
		    struct tsec_decision *out, uint32_t *roots, unsigned *nroots,
		    struct who *who, bool any_first)
{
	const struct tsec_context *c = &req->ctx;
	uint32_t has = c->has, root;
	uint64_t h;
	unsigned nr = any_first;
	unsigned af;
	int a;

	if (same_who(who, req)) {
		/* roots is who->roots: found for the request before. */
		*nroots = who->nroots;
		goto named;
	}
	if (who)
		who->valid = false;
	if (!name_scan(req->principal.ptr, req->principal.len, pol->seed, &h)) {
		invalid(out, "principal", "empty, too long, or holds a space or control character");
		return -1;
	}
	if ((root = tsec__edge_find(pol, TSEC__NS_PRINCIPAL, h, req->principal.ptr,
				    req->principal.len)))
		roots[nr++] = root;
	if (req->nroles > ROLES_MAX || (req->nroles && !req->roles)) {
		invalid(out, "roles", "more than 32 roles, or roles missing");
		return -1;
	}
	for (uint32_t i = 0; i < req->nroles; i++) {
		struct tsec_str r = req->roles[i];
		if (!r.ptr || !strip_role(&r) || !name_scan(r.ptr, r.len, pol->seed, &h)) {
			invalid(out, "roles", "a role is empty, too long, or holds a space or control character");
			return -1;
		}
		if ((root = tsec__edge_find(pol, TSEC__NS_ROLE, h, r.ptr, r.len)))
			roots[nr++] = root;
	}
	roots[any_first ? 0 : nr++] = pol->any_root;
	*nroots = nr;
	if (who) {
		who->valid = true;
		who->principal = req->principal;
		who->roles = req->roles;
		who->nroles = req->nroles;
		who->nroots = nr;
	}
named:
	a = req->action.ptr ? tsec__action_parse(req->action.ptr, req->action.len) : -1;
	if (a < 0) {
		invalid(out, "action", "unknown action");
		return -1;
	}
	if (has & ~TSEC_CTX__ALL) {
		invalid(out, "context", "unknown context field");
		return -1;
	}
	af = tsec_action_flags((unsigned)a);
	if (!(af & TSEC_AF_TTL) != !(has & TSEC_CTX_TTL_MS)) {
		invalid(out, "context.ttl_ms", "required for lock.acquire and lock.renew, and only there");
		return -1;
	}
	if ((has & TSEC_CTX_TTL_MS) && c->ttl_ms == 0) {
		invalid(out, "context.ttl_ms", "must be positive");
		return -1;
	}
	if (!(af & TSEC_AF_SIZE) != !(has & TSEC_CTX_SIZE)) {
		invalid(out, "context.size", "required for storage.store and cert.publish, and only there");
		return -1;
	}
	if ((has & TSEC_CTX_RECURSIVE) && (!(af & TSEC_AF_RECURSIVE) || c->recursive > 1)) {
		invalid(out, "context.recursive", "only for storage.list and storage.delete, 0 or 1");
		return -1;
	}
	if (!(af & TSEC_AF_DEST) != !(has & TSEC_CTX_DEST)) {
		invalid(out, "context.dest", "required for storage.move and cert.archive, and only there");
		return -1;
	}
	if ((has & TSEC_CTX_CERT_PEM) &&
	    (!(af & TSEC_AF_CERT) || !c->cert_pem.ptr || !c->cert_pem.len)) {
		invalid(out, "context.cert_pem", "only for storage.store and cert.publish, and not empty");
		return -1;
	}
	return a;
}

static void sort_hits(const struct tsec__policy *pol, uint32_t *v, unsigned n)
{
	for (unsigned i = 1; i < n; i++) {
		uint32_t x = v[i];
		unsigned j = i;
		while (j > 0 && pol->rules[v[j - 1]].order > pol->rules[x].order) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

static void finish(const struct tsec__policy *pol, struct hits *h,
		   const struct walk *w, struct tsec_decision *out)
{
	static const uint8_t status[3] = {
		TSEC_STATUS_FLOOR, TSEC_STATUS_DENIED, TSEC_STATUS_ALLOWED,
	};
	unsigned e, n;

	out->flags = 0;
	out->field[0] = '\0';
	out->detail[0] = '\0';
	for (e = 0; e < 3 && h->n[e] == 0; e++)
		;
	/*
	 * A condition error is told when it is of the deciding effect (a
	 * floor or deny that met one applies, failing closed) or, for a
	 * default denial, of an allow it kept from applying.  An allow's
	 * error beside a floor or deny changes nothing, and Check may not
	 * have read that allow (see struct walk).
	 */
	if (w->cond_error && w->cond_effect <= e) {
		out->flags |= TSEC_DECISION_COND_ERROR;
		snprintf(out->field, sizeof(out->field), "context.cert_pem");
		snprintf(out->detail, sizeof(out->detail), "rule %s: %s",
			 pol->rules[w->cond_rule].id, w->cond_error);
	}
	if (e == 3) {
		out->allow = 0;
		out->status = TSEC_STATUS_DEFAULT;
		out->nrules = 0;
		return;
	}
	sort_hits(pol, h->rule[e], h->n[e]);
	out->allow = e == TSEC_EFFECT_ALLOW - 1;
	out->status = status[e];
	n = h->n[e] < TSEC_DECISION_RULES ? h->n[e] : TSEC_DECISION_RULES;
	out->nrules = (uint8_t)n;
	if (h->n[e] > n || h->more[e])
		out->flags |= TSEC_DECISION_MORE_RULES;
	for (unsigned i = 0; i < n; i++)
		memcpy(out->rules[i], pol->rules[h->rule[e][i]].id, TSEC_ID_MAX);
}

static void report_begin(struct tsec_report *rep)
{
	rep->action = -1;
	rep->kind = TSEC_KIND_OTHER;
	rep->key[0] = '\0';
	rep->issuer[0] = '\0';
	rep->domain[0] = '\0';
	rep->nmatched = 0;
	rep->nmatched_total = 0;
	rep->nerrors = 0;
}

static void report_key(struct tsec_report *rep, struct tsec__key *k)
{
	tsec__key_derive(k);
	rep->kind = k->kind;
	tsec__key_format(k, rep->key, sizeof(rep->key));
	if (k->issuer_seg >= 0) {
		size_t l = k->len[k->issuer_seg];
		if (l >= sizeof(rep->issuer))
			l = sizeof(rep->issuer) - 1;
		tsec__copy(rep->issuer, k->base + k->off[k->issuer_seg], l);
		rep->issuer[l] = '\0';
	}
	tsec__key_domain(k, rep->domain, sizeof(rep->domain));
}

/*
 * The decision path's functions (here, tsec__key_split, tsec__domain_match,
 * tsec__domain_equal and mod_check; tsec__edge_find is inline) are marked
 * hot: they sit together in .text.hot, so code added elsewhere in the
 * module does not move them.
 * The same code linked in another object order ran verify_module's Check
 * 9% slower with 0.3% more instructions: placement alone.
 */
__attribute__((hot))
/*
 * A move must be allowed at both ends: the destination walked after the
 * source (w, h).  Floors and denies of either end count; an allow counts
 * only if both ends have one, so the destination is walked with its own
 * allow set and the source's allows merged in after.
 */
static void walk_dest(struct walk *w, struct hits *h, struct tsec__key *dest,
		      const uint32_t *roots, unsigned nroots)
{
	enum { A = TSEC_EFFECT_ALLOW - 1 };
	struct hits src = *h;

	h->n[A] = 0;
	h->more[A] = 0;
	w->end = 1;
	match_key(w, dest, roots, nroots);
	if (src.n[A] == 0 || h->n[A] == 0) {
		h->n[A] = 0;
		return;
	}
	for (unsigned i = 0; i < src.n[A]; i++) {
		uint32_t ri = src.rule[A][i];
		bool dup = false;

		for (unsigned j = 0; j < h->n[A]; j++)
			dup |= h->rule[A][j] == ri;
		if (!dup && h->n[A] < HIT_MAX)
			h->rule[A][h->n[A]++] = ri;
	}
}

static void decide_one(const struct tsec__policy *pol, const struct tsec_request *req,
		       struct tsec_decision *out, struct tsec_report *rep,
		       struct tsec_explain *ex, struct tsec__certcache *cache,
		       struct who *who)
{
	struct tsec__cert_facts cert;
	struct tsec__key key, dest;
	uint32_t mine[ROLES_MAX + 2], *roots = who ? who->roots : mine;
	unsigned nroots = 0;
	uint8_t *seen = NULL;
	struct hits h;
	struct walk w;
	char why[96];
	int a;

	if (rep)
		report_begin(rep);
	a = validate(pol, req, out, roots, &nroots, who, rep == NULL);
	if (a < 0)
		goto done;
	if (rep)
		rep->action = a;
	if (tsec__key_split(req->resource.ptr, req->resource.len,
			    (tsec_action_flags((unsigned)a) & TSEC_AF_ROOT) != 0, &key, why,
			    sizeof(why))) {
		invalid(out, "resource", why);
		goto done;
	}
	if (rep)
		report_key(rep, &key);
	if ((tsec_action_flags((unsigned)a) & TSEC_AF_DEST) &&
	    tsec__key_split(req->ctx.dest.ptr, req->ctx.dest.len, false, &dest,
			    why, sizeof(why))) {
		invalid(out, "context.dest", why);
		goto done;
	}

	h.n[0] = h.n[1] = h.n[2] = 0;
	h.more[0] = h.more[1] = h.more[2] = 0;
	w.pol = pol;
	w.seen = &seen;
	w.req = req;
	w.action = (unsigned)a;
	w.h = &h;
	w.rep = rep;
	w.ex = rep ? ex : NULL;
	w.end = 0;
	w.cache = cache;
	w.facts = &cert;
	w.have_facts = false;
	w.cond_error = NULL;
	w.cond_rule = 0;
	w.cond_effect = 3;
	w.best = 3;
	w.amask = 1u << a;
	match_key(&w, &key, roots, nroots);
	if (tsec_action_flags((unsigned)a) & TSEC_AF_DEST)
		walk_dest(&w, &h, &dest, roots, nroots);
	finish(pol, &h, &w, out);
	if (w.ex)
		tsec__explain_cert(&w);
done:
	if (rep && &rep->decision != out)
		rep->decision = *out;
	if (seen)
		free(seen);
}

void tsec__decide(const struct tsec__policy *pol,
		  const struct tsec_request *req, struct tsec_decision *out,
		  struct tsec_report *rep, struct tsec_explain *ex,
		  struct tsec__certcache *cache)
{
	decide_one(pol, req, out, rep, ex, cache, NULL);
}

__attribute__((hot))
void tsec__decide_batch(const struct tsec__policy *pol, const struct tsec_request *reqs,
			size_t n, struct tsec_decision *out, struct tsec__certcache *cache)
{
	struct who who;

	who.valid = false;
	for (size_t i = 0; i < n; i++)
		decide_one(pol, &reqs[i], &out[i], NULL, NULL, cache, &who);
}
