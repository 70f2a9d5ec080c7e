/*
 * The exact comparison of two policies (diff.h says what and why).
 *
 * The automaton: one NFA holding a branch for every language tracked
 * (each resource pattern, each domain pattern read off the key, and
 * "the domain segment is in wildcard_ form", which changes how the
 * module reads it), over an alphabet of the characters the patterns name
 * plus one that none names.  The walk is a breadth-first subset
 * construction; with each subset goes a little state of the key rules
 * (no empty, "." or ".." segment, none ending in a dot or a space), so
 * only keys the module takes are classes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/policytest/diff.h"
#include "broker/policytest/diff_private.h"
#include "common/certinfo.h"
#include "common/error.h"
#include "common/key.h"
#include "common/wire.h"

/* ---- the walk ---- */

/* The key rules' state: segment length so far (capped at 3), whether the
 * segment is all dots, whether its last character is a dot or a space,
 * whether the key has a character yet. */
#define ROLES_ALL 6                  /* every subset of up to this many roles */

#define V_LEN(v) ((v) & 3)
#define V_DOTS 4
#define V_BAD 8
#define V_ANY 16
#define V_DEAD (-1)
#define V_START V_DOTS

static int v_step(int v, const char *c, bool slash)
{
	if (slash) {
		if (!V_LEN(v) || ((v & V_DOTS) && V_LEN(v) <= 2) || (v & V_BAD))
			return V_DEAD;
		return V_DOTS | V_ANY;
	}
	return (V_LEN(v) < 3 ? V_LEN(v) + 1 : 3) | ((v & V_DOTS) && c[0] == '.' && !c[1] ? V_DOTS : 0) |
	       ((c[0] == '.' || c[0] == ' ') && !c[1] ? V_BAD : 0) | V_ANY;
}

static bool v_ok(int v)
{
	return (v & V_ANY) && V_LEN(v) && !((v & V_DOTS) && V_LEN(v) <= 2) && !(v & V_BAD);
}

/* A subset: its states (sorted) in the pool, with the key rules' state. */
struct subset {
	size_t off;
	int n, v;
	int parent, sym;             /* how it was reached (the first time) */
	uint64_t h;
};

struct walk {
	struct nfa *a;
	int *pool;
	size_t npool, cappool;
	struct subset *s;
	size_t ns, caps;
	int64_t *table;              /* open addressing: index + 1, 0 empty */
	size_t captable;
	/* Scratch. */
	int *stack, *mark, *buf;
	int gen;
};

static uint64_t set_hash(const int *v, int n, int vs)
{
	uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)(unsigned)vs;

	for (int i = 0; i < n; i++)
		h = (h ^ (uint64_t)(unsigned)v[i]) * 0x100000001b3ull;
	return h;
}

static int cmp_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;

	return (a > b) - (a < b);
}

/* The closure of buf[0..n) under epsilon edges, sorted, into buf; its
 * size. */
static int closure(struct walk *w, int n)
{
	int sp = 0, m = 0;

	w->gen++;
	for (int i = 0; i < n; i++)
		if (w->mark[w->buf[i]] != w->gen) {
			w->mark[w->buf[i]] = w->gen;
			w->stack[sp++] = w->buf[i];
		}
	while (sp) {
		int q = w->stack[--sp];

		w->buf[m++] = q;
		for (int e = w->a->head[q]; e >= 0; e = w->a->enext[e])
			if (w->a->ekind[e] == K_EPS && w->mark[w->a->eto[e]] != w->gen) {
				w->mark[w->a->eto[e]] = w->gen;
				w->stack[sp++] = w->a->eto[e];
			}
	}
	qsort(w->buf, (size_t)m, sizeof(int), cmp_int);
	return m;
}

/* The subset buf[0..n) with key state v: its index, added when new
 * (parent, sym say how); -1 out of memory. */
static long subset_of(struct walk *w, int n, int v, int parent, int sym, bool *added)
{
	uint64_t h = set_hash(w->buf, n, v);
	size_t i;

	*added = false;
	if ((w->ns + 1) * 2 > w->captable) {
		size_t cap = w->captable ? 2 * w->captable : 1 << 16;
		int64_t *t = calloc(cap, sizeof(*t));

		if (!t)
			return -1;
		for (size_t k = 0; k < w->ns; k++) {
			for (i = w->s[k].h & (cap - 1); t[i]; i = (i + 1) & (cap - 1))
				;
			t[i] = (int64_t)k + 1;
		}
		free(w->table);
		w->table = t;
		w->captable = cap;
	}
	for (i = h & (w->captable - 1); w->table[i]; i = (i + 1) & (w->captable - 1)) {
		struct subset *o = &w->s[w->table[i] - 1];
		if (o->h == h && o->n == n && o->v == v &&
		    !memcmp(w->pool + o->off, w->buf, (size_t)n * sizeof(int)))
			return (long)(w->table[i] - 1);
	}
	if (w->ns == w->caps) {
		size_t cap = w->caps ? 2 * w->caps : 1024;
		struct subset *s = realloc(w->s, cap * sizeof(*s));
		if (!s)
			return -1;
		w->s = s;
		w->caps = cap;
	}
	if (w->npool + (size_t)n > w->cappool) {
		size_t cap = w->cappool ? 2 * w->cappool : 1 << 16;
		int *p;
		while (cap < w->npool + (size_t)n)
			cap *= 2;
		if (!(p = realloc(w->pool, cap * sizeof(int))))
			return -1;
		w->pool = p;
		w->cappool = cap;
	}
	memcpy(w->pool + w->npool, w->buf, (size_t)n * sizeof(int));
	w->s[w->ns] = (struct subset){ w->npool, n, v, parent, sym, h };
	w->npool += (size_t)n;
	w->table[i] = (int64_t)w->ns + 1;
	*added = true;
	return (long)w->ns++;
}

/* The key that reached subset k first (shortest), into out. */
static void key_of(const struct walk *w, size_t k, char *out, size_t cap)
{
	int path[TSEC_KEY_MAX + 1], n = 0;
	size_t o = 0;

	for (long i = (long)k; i > 0 && w->s[i].parent >= 0 && n < TSEC_KEY_MAX; i = w->s[i].parent)
		path[n++] = w->s[i].sym;
	while (n-- > 0 && o + 5 < cap) {
		const char *c = w->a->sym[path[n]];
		memcpy(out + o, c, strlen(c));
		o += strlen(c);
	}
	out[o] = 0;
}

/* ---- the classes of the other fields, and the decisions ---- */

struct rinfo {
	json_t *r;                   /* borrowed from its policy */
	int langs[64];               /* its resources' languages */
	int nlangs;
};

struct diff {
	struct tsec_bus *bus[2];
	struct rinfo *rules;
	size_t nrules;
	tsec__diff_fn fn;
	void *ctx;
	struct tsec__diff_stats *st;
	json_t *moves;               /* principal combination -> {pair: key} */
	json_t *certs;               /* certificates made: what -> PEM */
	int64_t now;
	struct tsec_error *err;
	int rc;
};

#define OTHER_PRINCIPAL "svc:tsec-diff-other"
#define BATCH 256

struct batch {
	struct tsec_request r[BATCH];
	struct tsec_str roles[BATCH][ROLES_ALL + 2];
	char combo[BATCH][160];
	int n;
};

/* A request as the wire takes it, with its principal and roles. */
static json_t *request_json(const struct tsec_request *r)
{
	json_t *j = tsec__request_to_json(r), *roles = json_array();

	json_object_set_new(j, "principal", json_stringn(r->principal.ptr, r->principal.len));
	for (uint32_t i = 0; i < r->nroles; i++)
		json_array_append_new(roles, json_stringn(r->roles[i].ptr, r->roles[i].len));
	json_object_set_new(j, "roles", roles);
	return j;
}

/* Decides the batch under both policies; reports what differs, and
 * remembers each move's verdicts by principal combination. */
static void flush(struct diff *d, struct batch *b)
{
	struct tsec_decision da[BATCH], db[BATCH];

	if (!b->n || d->rc)
		return;
	if (tsec_bus_check(d->bus[0], "policy", b->r, (size_t)b->n, da, d->err) ||
	    tsec_bus_check(d->bus[1], "policy", b->r, (size_t)b->n, db, d->err)) {
		d->rc = d->err ? d->err->code : TSEC_EIO;
		return;
	}
	for (int i = 0; i < b->n; i++) {
		d->st->asked++;
		if (da[i].allow != db[i].allow) {
			json_t *j = request_json(&b->r[i]);
			d->st->differ++;
			if (d->fn)
				d->fn(d->ctx, j, &da[i], &db[i]);
			json_decref(j);
		}
		if (b->r[i].ctx.has & TSEC_CTX_DEST) {
			json_t *m = json_object_get(d->moves, b->combo[i]);
			char pair[4] = { (char)('0' + da[i].allow), (char)('0' + db[i].allow), 0 };

			if (!m)
				json_object_set_new(d->moves, b->combo[i], m = json_object());
			if (!json_object_get(m, pair))
				json_object_set_new(m, pair, json_stringn(b->r[i].resource.ptr,
									  b->r[i].resource.len));
		}
	}
	b->n = 0;
}

static void add_cert(struct diff *d, struct batch *b, const char *key, const char *who,
		     const char *const *roles, int nroles, unsigned action, unsigned has,
		     uint64_t num, const char *dest, const char *pem);

static void add(struct diff *d, struct batch *b, const char *key, const char *who,
		const char *const *roles, int nroles, unsigned action, unsigned has, uint64_t num,
		const char *dest)
{
	add_cert(d, b, key, who, roles, nroles, action, has, num, dest, NULL);
}

static void add_cert(struct diff *d, struct batch *b, const char *key, const char *who,
		     const char *const *roles, int nroles, unsigned action, unsigned has,
		     uint64_t num, const char *dest, const char *pem)
{
	struct tsec_request *r;
	int o = 0;

	if (b->n == BATCH)
		flush(d, b);
	r = &b->r[b->n];
	memset(r, 0, sizeof(*r));
	r->principal = (struct tsec_str){ who, strlen(who) };
	for (int i = 0; i < nroles; i++)
		b->roles[b->n][i] = (struct tsec_str){ roles[i], strlen(roles[i]) };
	r->roles = b->roles[b->n];
	r->nroles = (uint32_t)nroles;
	r->action = (struct tsec_str){ tsec_action_name(action), strlen(tsec_action_name(action)) };
	r->resource = (struct tsec_str){ key, strlen(key) };
	r->ctx.has = has;
	if (has & TSEC_CTX_TTL_MS)
		r->ctx.ttl_ms = num;
	if (has & TSEC_CTX_SIZE)
		r->ctx.size = num;
	if (has & TSEC_CTX_RECURSIVE)
		r->ctx.recursive = 1;
	if (has & TSEC_CTX_DEST)
		r->ctx.dest = (struct tsec_str){ dest, strlen(dest) };
	if (pem) {
		r->ctx.has |= TSEC_CTX_CERT_PEM;
		r->ctx.cert_pem = (struct tsec_str){ pem, strlen(pem) };
	}
	o = snprintf(b->combo[b->n], sizeof(b->combo[0]), "%u|%s", action, who);
	for (int i = 0; i < nroles && o < (int)sizeof(b->combo[0]); i++)
		o += snprintf(b->combo[b->n] + o, sizeof(b->combo[0]) - (size_t)o, "|%s", roles[i]);
	b->n++;
}

/* The values a condition bound tells apart: each bound and one past it,
 * and lo, each once. */
static void bounds(json_t *out, const struct diff *d, const uint8_t *bits, const char *name,
		   json_int_t lo)
{
	json_array_append_new(out, json_integer(lo));
	for (size_t i = 0; i < d->nrules; i++) {
		const struct rinfo *ri = &d->rules[i];
		json_t *v = json_object_get(json_object_get(ri->r, "when"), name);
		bool on = false;

		for (int k = 0; k < ri->nlangs && !on; k++)
			on = bits[ri->langs[k] / 8] >> (ri->langs[k] % 8) & 1;
		if (on && json_is_integer(v) && json_integer_value(v) >= 0)
			for (json_int_t x = json_integer_value(v); x <= json_integer_value(v) + 1; x++) {
				bool have = false;
				for (size_t k = 0; k < json_array_size(out) && !have; k++)
					have = json_integer_value(json_array_get(out, k)) == x;
				if (!have)
					json_array_append_new(out, json_integer(x));
			}
	}
}

/* The integer bounds among the conditions (TSEC_CONDITIONS): each
 * request carrying its field is probed at lo, at each bound the rules
 * on a class set, and one past it. */
static const struct {
	const char *name;
	unsigned af, ctx;
	json_int_t lo;
} bounded[] = {
#define TSEC_X_COND(id, name, carried, bound, lo) { name, carried, bound, lo },
	TSEC_CONDITIONS(TSEC_X_COND)
#undef TSEC_X_COND
};
#define NCONDS (sizeof(bounded) / sizeof(bounded[0]))

/* One request of each probe of the bounds an action's requests carry
 * (with a certificate, when pem is not NULL). */
static void add_bounds(struct diff *d, struct batch *b, const char *key, const char *who,
		       const char *const *roles, int nroles, unsigned action,
		       json_t *const *probes, const char *pem)
{
	unsigned f = tsec_action_flags(action);
	json_t *t;
	size_t k;

	for (size_t c = 0; c < NCONDS; c++)
		if (bounded[c].ctx && (f & bounded[c].af))
			json_array_foreach(probes[c], k, t)
				add_cert(d, b, key, who, roles, nroles, action, bounded[c].ctx,
					 (uint64_t)json_integer_value(t), NULL, pem);
}

#define CERTS_MAX 256

/* The certificates the cert conditions of the rules on a class tell
 * apart (diff_cert.c), borrowed from d->certs; their count. */
static size_t cert_classes(struct diff *d, const uint8_t *bits, const char *key,
			   const char **out)
{
	json_t *conds = json_array();
	size_t n;

	for (size_t i = 0; i < d->nrules; i++) {
		const struct rinfo *ri = &d->rules[i];
		json_t *c = json_object_get(json_object_get(ri->r, "when"), "cert");
		bool on = false;

		for (int x = 0; x < ri->nlangs && !on; x++)
			on = bits[ri->langs[x] / 8] >> (ri->langs[x] % 8) & 1;
		if (on && c)
			json_array_append(conds, c);
	}
	n = tsec__dn_certs(d->certs, d->now, key, conds, out, CERTS_MAX);
	json_decref(conds);
	return n;
}

/* Whether a rule with a cert condition applies to the class. */
static bool cert_rules_on(const struct diff *d, const uint8_t *bits)
{
	for (size_t i = 0; i < d->nrules; i++) {
		const struct rinfo *ri = &d->rules[i];

		if (!json_object_get(json_object_get(ri->r, "when"), "cert"))
			continue;
		for (int x = 0; x < ri->nlangs; x++)
			if (bits[ri->langs[x] / 8] >> (ri->langs[x] % 8) & 1)
				return true;
	}
	return false;
}

/*
 * The principals and roles the rules on this class's keys name, and those
 * they except ("except": a floor that binds everyone but them), into ids
 * and roles (sets).
 */
static void names_on(const struct diff *d, const uint8_t *bits, json_t *ids, json_t *roles)
{
	for (size_t i = 0; i < d->nrules; i++) {
		const struct rinfo *ri = &d->rules[i];
		json_t *ps = json_object_get(ri->r, "principal");
		bool on = false;

		for (int k = 0; k < ri->nlangs && !on; k++)
			on = bits[ri->langs[k] / 8] >> (ri->langs[k] % 8) & 1;
		if (!on)
			continue;
		for (int list = 0; list < 2; list++, ps = json_object_get(ri->r, "except"))
			for (size_t k = 0; k < json_array_size(ps); k++) {
				const char *p = json_string_value(json_array_get(ps, k));
				if (!p || !strcmp(p, "*"))
					continue;
				if (!strncmp(p, "role:", 5))
					json_object_set_new(roles, p + 5, json_true());
				else
					json_object_set_new(ids, p, json_true());
			}
	}
}

/* Every request of one key class (bits: the languages its key is in). */
static void decide_class(struct diff *d, struct batch *b, const char *key, const uint8_t *bits)
{
	json_t *ids = json_object(), *roles = json_object(), *probes[NCONDS] = { NULL }, *v;
	const char *role[ROLES_ALL + 2], *id, *all_roles[64];
	const char **certs = calloc(CERTS_MAX, sizeof(char *));
	size_t ncerts = 0;
	int nall = 0;

	names_on(d, bits, ids, roles);
	json_object_set_new(ids, OTHER_PRINCIPAL, json_true());
	json_object_foreach(roles, id, v)
		if (nall < 64)
			all_roles[nall++] = id;
	if (nall > ROLES_ALL)
		d->st->exact = false;
	for (size_t c = 0; c < NCONDS; c++)
		if (bounded[c].ctx) {
			probes[c] = json_array();
			bounds(probes[c], d, bits, bounded[c].name, bounded[c].lo);
		}
	if (certs && cert_rules_on(d, bits))
		ncerts = cert_classes(d, bits, key, certs);
	json_object_foreach(ids, id, v) {
		/* Every subset of the roles named (up to ROLES_ALL of them), or
		 * none, each alone and all. */
		unsigned long subsets = nall <= ROLES_ALL ? 1ul << nall : (unsigned long)nall + 2;

		for (unsigned long s = 0; s < subsets; s++) {
			int nr = 0;

			if (nall <= ROLES_ALL) {
				for (int k = 0; k < nall; k++)
					if (s >> k & 1)
						role[nr++] = all_roles[k];
			} else if (s > 0 && s <= (unsigned long)nall) {
				role[nr++] = all_roles[s - 1];
			} else if (s > 0) {
				for (int k = 0; k < nall && nr < ROLES_ALL + 2; k++)
					role[nr++] = all_roles[k];
			}
			for (unsigned a = 0; a < TSEC_ACTION__COUNT; a++) {
				unsigned f = tsec_action_flags(a);

				if (f & TSEC_AF_DEST) {
					add(d, b, key, id, role, nr, a, TSEC_CTX_DEST, 0, key);
					continue;
				}
				add(d, b, key, id, role, nr, a, 0, 0, NULL);
				add_bounds(d, b, key, id, role, nr, a, probes, NULL);
				/* With a certificate of each class (bounds too:
				 * a rule may bound both). */
				if (f & TSEC_AF_CERT)
					for (size_t c = 0; c < ncerts; c++) {
						add_cert(d, b, key, id, role, nr, a, 0, 0, NULL,
							 certs[c]);
						add_bounds(d, b, key, id, role, nr, a, probes,
							   certs[c]);
					}
				if (f & TSEC_AF_RECURSIVE)
					add(d, b, key, id, role, nr, a, TSEC_CTX_RECURSIVE, 0, NULL);
			}
		}
		/* The strings batched borrow from ids, roles and key: decided
		 * before they go. */
		flush(d, b);
	}
	flush(d, b);
	json_decref(ids);
	json_decref(roles);
	for (size_t c = 0; c < NCONDS; c++)
		json_decref(probes[c]);
	free(certs);
}

/* Moves (and archivals: every action with a destination) between keys
 * of classes whose ends the two policies judge differently (one is
 * allowed only when both ends are): each pair of verdict pairs seen for
 * one action and principal combination, both ways. */
static void decide_moves(struct diff *d, struct batch *b)
{
	const char *combo, *pa, *pb;
	json_t *m, *ka, *kb;

	json_object_foreach(d->moves, combo, m) {
		char buf[160], *role[ROLES_ALL + 2], *save = NULL, *who, *act;
		int nr = 0;

		/* "<action>|<principal>|<role>...": the action's pairs only. */
		snprintf(buf, sizeof(buf), "%s", combo);
		act = strtok_r(buf, "|", &save);
		who = strtok_r(NULL, "|", &save);
		if (!act || !who)
			continue;
		while (nr < ROLES_ALL + 2 && (role[nr] = strtok_r(NULL, "|", &save)))
			nr++;
		json_object_foreach(m, pa, ka)
			json_object_foreach(m, pb, kb)
				if (strcmp(pa, pb))
					add(d, b, json_string_value(ka), who, (const char *const *)role,
					    nr, (unsigned)atoi(act), TSEC_CTX_DEST, 0,
					    json_string_value(kb));
		flush(d, b);
	}
}

/* The languages of both policies' patterns, each once: "r:" resources,
 * "d:" domains (lower case). */
static int lang_of(json_t *langs, const char *kind, const char *pat)
{
	char key[TSEC_KEY_MAX + 8];
	json_t *v;

	snprintf(key, sizeof(key), "%s%s", kind, pat);
	if (kind[0] == 'd')
		for (char *c = key + 2; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c | 0x20);
	if ((v = json_object_get(langs, key)))
		return (int)json_integer_value(v);
	json_object_set_new(langs, key, json_integer((json_int_t)json_object_size(langs)));
	return (int)json_object_size(langs) - 1;
}

/* The rules of both policies, their languages, and the automaton of
 * them all (its start state into *start); 0 or an error. */
static int build(struct diff *d, json_t *pols[2], struct nfa *a, json_t *langs, int *start)
{
	static const char *const sections[] = { "floor", "rules" };
	const char *name;
	json_t *r, *v;
	size_t i, j;
	int wild;

	/* The rules, their languages, the alphabet. */
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < 2; t++)
			d->nrules += json_array_size(json_object_get(pols[p], sections[t]));
	if (!(d->rules = calloc(d->nrules + 1, sizeof(*d->rules)))) {
		return tsec__seterr(d->err, TSEC_ENOMEM, "", NULL);
	}
	d->nrules = 0;
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < 2; t++)
			json_array_foreach(json_object_get(pols[p], sections[t]), i, r) {
				struct rinfo *ri = &d->rules[d->nrules++];

				ri->r = r;
				json_array_foreach(json_object_get(r, "resource"), j, v)
					if (json_is_string(v) && ri->nlangs < 64) {
						ri->langs[ri->nlangs++] = lang_of(langs, "r:",
										 json_string_value(v));
						tsec__dn_syms_of(a, json_string_value(v), false);
					}
				if (json_object_get(json_object_get(r, "when"), "cert"))
					d->st->cert_rules++;
				json_array_foreach(json_object_get(r, "domain"), j, v)
					if (json_is_string(v)) {
						lang_of(langs, "d:", json_string_value(v));
						tsec__dn_syms_of(a, json_string_value(v), true);
					}
			}
	wild = (int)json_object_size(langs);
	a->nlang = wild + 1;
	tsec__dn_syms_of(a, "certificates.wildcard_", false);
	a->slash = tsec__dn_sym_add(a, "/", 1);
	a->dot = tsec__dn_sym_find(a, ".", 1);
	/* One character no pattern names: every other behaves as it does. */
	for (const char *c = "xqzjkvy0123456789"; *c; c++)
		if (tsec__dn_sym_find(a, c, 1) < 0) {
			tsec__dn_sym_add(a, c, 1);
			break;
		}
	*start = tsec__dn_state_new(a);
	json_object_foreach(langs, name, v) {
		if (name[0] == 'r')
			tsec__dn_resource(a, *start, name + 2, (int)json_integer_value(v));
		else
			tsec__dn_domain(a, *start, name + 2, (int)json_integer_value(v));
	}
	/* (How the module reads a wildcard_ domain matters only to rules
	 * with domains.) */
	for (size_t k = 0; k < d->nrules; k++)
		if (json_object_get(d->rules[k].r, "domain")) {
			tsec__dn_wildform(a, *start, wild);
			break;
		}
	return 0;
}

/* The walk, shortest keys first: every class of keys decided. */
static void walk_keys(struct diff *d, struct walk *w, struct nfa *a, int start, json_t *vecs,
		      size_t nb, struct batch *b, size_t max_states)
{
	bool added;
	uint8_t *bits = calloc(1, nb + 1);
	char key[TSEC_KEY_MAX + 8], *hex = malloc(2 * nb + 1);

	w->buf[0] = start;
	if (!bits || !hex || subset_of(w, closure(w, 1), V_START, -1, -1, &added) < 0) {
		free(bits);
		free(hex);
		d->rc = tsec__seterr(d->err, TSEC_ENOMEM, "", NULL);
		return;
	}
	for (size_t k = 0; k < w->ns && !d->rc; k++) {
		struct subset cur = w->s[k];

		/* A class: the key rules take it (or it is the root), and
		 * its languages are a combination not met before. */
		if (v_ok(cur.v) || k == 0) {
			bool root = k == 0;

			memset(bits, 0, nb);
			for (int q = 0; q < cur.n; q++) {
				int l = a->accept[w->pool[cur.off + (size_t)q]];
				if (l >= 0)
					bits[l / 8] |= (uint8_t)(1u << (l % 8));
			}
			for (size_t x = 0; x < nb; x++)
				snprintf(hex + 2 * x, 3, "%02x", bits[x]);
			hex[2 * nb] = 0;
			/* The root is a class of its own (only a listing
			 * may name it): its languages say nothing of keys. */
			if (root || !json_object_get(vecs, hex)) {
				if (!root)
					json_object_set_new(vecs, hex, json_true());
				key_of(w, k, key, sizeof(key));
				d->st->key_classes++;
				decide_class(d, b, key, bits);
			}
		}
		if (w->ns >= max_states) {
			d->st->exact = false;
			continue;
		}
		for (int sy = 0; sy < a->nsym && !d->rc; sy++) {
			int n = 0, nv = v_step(cur.v, a->sym[sy], sy == a->slash);

			if (nv == V_DEAD)
				continue;
			for (int q = 0; q < cur.n; q++) {
				int st = w->pool[w->s[k].off + (size_t)q];
				for (int e = a->head[st]; e >= 0; e = a->enext[e]) {
					int kd = a->ekind[e];
					if ((kd == K_SYM && a->esym[e] == sy) ||
					    (kd == K_SEG && sy != a->slash) ||
					    (kd == K_LABEL && sy != a->slash && sy != a->dot))
						w->buf[n++] = a->eto[e];
				}
			}
			if (subset_of(w, closure(w, n), nv, (int)k, sy, &added) < 0) {
				d->rc = tsec__seterr(d->err, TSEC_ENOMEM, "", NULL);
				break;
			}
		}
	}
	free(bits);
	free(hex);
}

static int diff_run(struct diff *d, json_t *pols[2], size_t max_states)
{
	struct nfa *a = calloc(1, sizeof(*a));
	struct walk w = { 0 };
	struct batch *b = calloc(1, sizeof(*b));
	json_t *langs = json_object(), *vecs = json_object();
	int start = 0, rc = 0;
	size_t nb;

	if (!a || !b || !langs || !vecs) {
		rc = tsec__seterr(d->err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	if ((rc = build(d, pols, a, langs, &start)))
		goto out;
	if (a->oom || !(w.stack = malloc((size_t)a->nstate * sizeof(int))) ||
	    !(w.mark = calloc((size_t)a->nstate, sizeof(int))) ||
	    !(w.buf = malloc(((size_t)a->nstate + (size_t)a->nedge + 1) * sizeof(int)))) {
		rc = tsec__seterr(d->err, TSEC_ENOMEM, "", "the patterns' automaton");
		goto out;
	}
	w.a = a;
	nb = ((size_t)a->nlang + 7) / 8;
	walk_keys(d, &w, a, start, vecs, nb, b, max_states);
	if (!d->rc)
		decide_moves(d, b);
	d->st->states = w.ns;
	rc = d->rc;
out:
	if (a)
		tsec__dn_free(a);
	free(a);
	free(b);
	free(w.pool);
	free(w.s);
	free(w.table);
	free(w.stack);
	free(w.mark);
	free(w.buf);
	json_decref(langs);
	json_decref(vecs);
	return rc;
}

int tsec__policy_diff(struct tsec_bus *a, struct tsec_bus *b, json_t *pa, json_t *pb,
		      size_t max_states, tsec__diff_fn fn, void *ctx,
		      struct tsec__diff_stats *st, struct tsec_error *err)
{
	struct diff d = { { a, b }, NULL, 0, fn, ctx, st, json_object(), json_object(),
			  (int64_t)time(NULL), err, 0 };
	json_t *pols[2] = { pa, pb };
	int rc;

	memset(st, 0, sizeof(*st));
	st->exact = true;
	if (!d.moves || !d.certs) {
		json_decref(d.moves);
		json_decref(d.certs);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	rc = diff_run(&d, pols, max_states ? max_states : 4000000);
	free(d.rules);
	json_decref(d.moves);
	json_decref(d.certs);
	return rc;
}
