/*
 * Policy compiler: JSON (jansson) in, indexed tables out.
 *
 * Each principal pattern (an id, a role, or "*") owns a trie over resource
 * pattern segments.  Literal segments are edges in one hash table shared by
 * all tries; glob segments hang off their node in a short list; "**" is a
 * dedicated child.  Terminal entries name rules.  Evaluation walks only the
 * tries of the request's principal, roles and "*", and in each only the
 * branches the key can take, so rules that cannot match cost nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "module/module_private.h"

#define TSEC__NS_RULE_ID 0xfffffffdu
#define PRINCIPAL_MAX 255
#define DOMAIN_MAX 253
#define DSTAR_MAX 2

struct cc {
	struct tsec__policy *pol;
	struct tsec_error *err;
	const char *section;         /* "floor" or "rules" */
	size_t index;
	/* Lint: every rule's error is kept here and compiling goes on. */
	struct tsec_error *errs;
	size_t max, nerrs;
	bool failed;
};

/* Reports an error at /section/index[/field[/sub]]. */
__attribute__((format(printf, 4, 5)))
static int cc_fail(struct cc *c, const char *field, long sub, const char *fmt,
		   ...)
{
	char where[TSEC_ERR_WHERE], msg[TSEC_ERR_MSG];
	va_list ap;

	if (!c->section)
		snprintf(where, sizeof(where), "%s%s", field ? "/" : "",
			 field ? field : "");
	else if (!field)
		snprintf(where, sizeof(where), "/%s/%zu", c->section, c->index);
	else if (sub < 0)
		snprintf(where, sizeof(where), "/%s/%zu/%s", c->section,
			 c->index, field);
	else
		snprintf(where, sizeof(where), "/%s/%zu/%s/%ld", c->section,
			 c->index, field, sub);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return tsec__seterr(c->err, TSEC_EPOLICY, where, "%s", msg);
}

static int oom(struct cc *c)
{
	return tsec__seterr(c->err, TSEC_ENOMEM, "", "out of memory compiling policy");
}

/* Grows an array of `size`-byte items to hold at least need items. */
static int grow(void **arr, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t ncap;
	void *n;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 16;
	while (ncap < need) {
		if (ncap > UINT32_MAX / 2)
			return TSEC_ENOMEM;
		ncap *= 2;
	}
	n = realloc(*arr, (size_t)ncap * size);
	if (!n)
		return TSEC_ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

static int arena_add(struct tsec__policy *pol, const char *p, size_t n,
		     uint32_t *off)
{
	if (pol->arena_len + n > UINT32_MAX)
		return TSEC_ENOMEM;
	if (pol->arena_len + n > pol->arena_cap) {
		size_t ncap = pol->arena_cap ? pol->arena_cap : 4096;
		char *a;
		while (ncap < pol->arena_len + n)
			ncap *= 2;
		a = realloc(pol->arena, ncap);
		if (!a)
			return TSEC_ENOMEM;
		pol->arena = a;
		pol->arena_cap = ncap;
	}
	memcpy(pol->arena + pol->arena_len, p, n);
	*off = (uint32_t)pol->arena_len;
	pol->arena_len += n;
	return 0;
}

static uint64_t edge_hash(const struct tsec__policy *pol, uint32_t parent,
			  const char *p, size_t n)
{
	return tsec__edge_hash(tsec__hash(pol->seed, p, n), parent);
}

uint32_t tsec__edge_find(const struct tsec__policy *pol, uint32_t parent,
			 uint64_t hs, const char *p, size_t n)
{
	uint64_t h = tsec__edge_hash(hs, parent);
	uint32_t i = (uint32_t)h & pol->edge_mask;

	for (;;) {
		const struct tsec__edge *e = &pol->edges[i];
		if (e->child == 0)
			return 0;
		if (e->hash == h && e->parent == parent && e->len == n &&
		    memcmp(pol->arena + e->off, p, n) == 0)
			return e->child;
		i = (i + 1) & pol->edge_mask;
	}
}

static int edges_resize(struct tsec__policy *pol, uint32_t nsize)
{
	struct tsec__edge *n = calloc(nsize, sizeof(*n));

	if (!n)
		return TSEC_ENOMEM;
	for (uint32_t i = 0; pol->edges && i <= pol->edge_mask; i++) {
		const struct tsec__edge *e = &pol->edges[i];
		uint32_t j;
		if (!e->child)
			continue;
		j = (uint32_t)e->hash & (nsize - 1);
		while (n[j].child)
			j = (j + 1) & (nsize - 1);
		n[j] = *e;
	}
	free(pol->edges);
	pol->edges = n;
	pol->edge_mask = nsize - 1;
	return 0;
}

/*
 * Finds or adds the edge (parent, bytes) -> value.  A new edge takes
 * *value as its child; an existing one returns its child in *value and
 * sets *found.
 */
static int edge_put(struct tsec__policy *pol, uint32_t parent, const char *p,
		    size_t n, uint32_t *value, bool *found)
{
	uint64_t h;
	uint32_t i, off;

	if ((pol->nedges + 1) * 2 > pol->edge_mask + 1 &&
	    edges_resize(pol, (pol->edge_mask + 1) * 2))
		return TSEC_ENOMEM;
	h = edge_hash(pol, parent, p, n);
	i = (uint32_t)h & pol->edge_mask;
	for (;;) {
		struct tsec__edge *e = &pol->edges[i];
		if (e->child == 0)
			break;
		if (e->hash == h && e->parent == parent && e->len == n &&
		    memcmp(pol->arena + e->off, p, n) == 0) {
			*value = e->child;
			*found = true;
			return 0;
		}
		i = (i + 1) & pol->edge_mask;
	}
	if (arena_add(pol, p, n, &off))
		return TSEC_ENOMEM;
	pol->edges[i] = (struct tsec__edge){ h, parent, off, (uint32_t)n, *value };
	pol->nedges++;
	*found = false;
	return 0;
}

static int node_new(struct tsec__policy *pol, uint32_t *id)
{
	if (grow((void **)&pol->nodes, &pol->cap_nodes, pol->nnodes + 1,
		 sizeof(*pol->nodes)))
		return TSEC_ENOMEM;
	pol->nodes[pol->nnodes] = (struct tsec__node){ 0, 0, 0 };
	*id = pol->nnodes++;
	return 0;
}

/* Child of `node` along a literal segment, created if missing. */
static int child_literal(struct tsec__policy *pol, uint32_t node,
			 const char *s, size_t n, uint32_t *out)
{
	uint32_t id = pol->nnodes;
	bool found;

	if (edge_put(pol, node, s, n, &id, &found))
		return TSEC_ENOMEM;
	if (!found && node_new(pol, &id))
		return TSEC_ENOMEM;
	*out = id;
	return 0;
}

static int child_glob(struct tsec__policy *pol, uint32_t node, const char *s,
		      size_t n, uint32_t *out)
{
	uint32_t g, id;

	for (g = pol->nodes[node].globs; g; g = pol->globs[g].next) {
		if (pol->globs[g].len == n &&
		    memcmp(pol->arena + pol->globs[g].off, s, n) == 0) {
			*out = pol->globs[g].child;
			return 0;
		}
	}
	if (grow((void **)&pol->globs, &pol->cap_globs, pol->nglobs + 1,
		 sizeof(*pol->globs)) || node_new(pol, &id))
		return TSEC_ENOMEM;
	g = pol->nglobs++;
	if (arena_add(pol, s, n, &pol->globs[g].off))
		return TSEC_ENOMEM;
	pol->globs[g].len = (uint32_t)n;
	{
		const char *star = memchr(s, '*', n);
		bool one = memchr(star + 1, '*', n - (size_t)(star - s) - 1) == NULL;
		pol->globs[g].kind = n == 1 ? TSEC__GLOB_ANY
			: one && star == s ? TSEC__GLOB_SUFFIX
			: one && star == s + n - 1 ? TSEC__GLOB_PREFIX
			: TSEC__GLOB_GENERAL;
	}
	pol->globs[g].child = id;
	pol->globs[g].next = pol->nodes[node].globs;
	pol->nodes[node].globs = g;
	*out = id;
	return 0;
}

static int child_dstar(struct tsec__policy *pol, uint32_t node, uint32_t *out)
{
	uint32_t id;

	if (pol->nodes[node].dstar) {
		*out = pol->nodes[node].dstar;
		return 0;
	}
	if (node_new(pol, &id))
		return TSEC_ENOMEM;
	pol->nodes[node].dstar = id;
	*out = id;
	return 0;
}

static int term_add(struct tsec__policy *pol, uint32_t node, uint32_t rule)
{
	uint32_t t;

	for (t = pol->nodes[node].terms; t; t = pol->terms[t].next)
		if (pol->terms[t].rule == rule)
			return 0;
	if (grow((void **)&pol->terms, &pol->cap_terms, pol->nterms + 1,
		 sizeof(*pol->terms)))
		return TSEC_ENOMEM;
	t = pol->nterms++;
	pol->terms[t].rule = rule;
	pol->terms[t].next = pol->nodes[node].terms;
	pol->nodes[node].terms = t;
	return 0;
}

/* ---- field validation ---- */

static bool id_ok(const char *s, size_t n)
{
	if (n == 0 || n >= TSEC_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		      c == '.' || c == ':'))
			return false;
	}
	return true;
}

/* Returns NULL if ok, else why. */
static const char *principal_bad(const char *s, size_t n)
{
	if (n == 0)
		return "empty principal";
	if (n > PRINCIPAL_MAX)
		return "principal longer than 255 bytes";
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= 0x20 || c == 0x7f)
			return "principal holds a space or control character";
		if (c == '*' && n != 1)
			return "'*' must be the whole principal";
	}
	if (n == 5 && memcmp(s, "role:", 5) == 0)
		return "role name is empty";
	return NULL;
}

static const char *domain_bad(const char *s, size_t n)
{
	size_t label = 0;
	int stars = 0;

	if (n == 0 || n > DOMAIN_MAX)
		return "domain pattern empty or longer than 253 bytes";
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? s[i] : '.';
		if (c == '.') {
			if (label == 0)
				return "empty label in domain pattern";
			label = 0;
			continue;
		}
		label++;
		if (c == '*') {
			if ((i > 0 && s[i - 1] != '.') ||
			    (i + 1 < n && s[i + 1] != '.'))
				return "'*' must be a whole label";
			if (++stars > 1)
				return "at most one '*' label per domain pattern";
		} else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '-' || c == '_')) {
			return "invalid character in domain pattern";
		}
	}
	return NULL;
}

/*
 * Validates a resource pattern; on success fills segment offsets/lengths
 * (consecutive "**" collapsed).
 */
static const char *resource_bad(const char *s, size_t n, uint16_t *off,
				uint16_t *len, unsigned *nseg)
{
	size_t i = 0;
	unsigned dstars = 0;

	*nseg = 0;
	if (n == 0)
		return "empty resource pattern";
	if (n > TSEC_KEY_MAX)
		return "resource pattern longer than 1024 bytes";
	if (s[0] == '/')
		return "resource pattern starts with '/'";
	while (i <= n) {
		size_t start = i, l;
		bool star = false;
		while (i < n && s[i] != '/') {
			unsigned char c = (unsigned char)s[i];
			if (c < 0x20 || c == 0x7f)
				return "control character in resource pattern";
			if (c == '\\' || c == ':')
				return "backslash or colon in resource pattern";
			if (c == '*')
				star = true;
			i++;
		}
		l = i - start;
		i++;
		if (l == 0)
			return "empty segment in resource pattern";
		if ((l == 1 && s[start] == '.') ||
		    (l == 2 && s[start] == '.' && s[start + 1] == '.'))
			return "'.' or '..' segment in resource pattern";
		if (s[start + l - 1] == '.' || s[start + l - 1] == ' ')
			return "segment ends in dot or space";
		if (l > 255)
			return "segment longer than 255 bytes";
		if (star && memmem(s + start, l, "**", 2)) {
			if (l != 2)
				return "'**' must stand alone as a segment";
			if (*nseg && len[*nseg - 1] == 2 &&
			    memcmp(s + off[*nseg - 1], "**", 2) == 0)
				continue; /* a run of "**" is one "**" */
			if (++dstars > DSTAR_MAX)
				return "more than two '**' segments";
		}
		if (*nseg == TSEC_KEY_SEGMENTS)
			return "resource pattern has more than 64 segments";
		off[*nseg] = (uint16_t)start;
		len[*nseg] = (uint16_t)l;
		(*nseg)++;
	}
	return NULL;
}

/* ---- rules ---- */

static int want_array(struct cc *c, json_t *v, const char *field)
{
	if (!json_is_array(v))
		return cc_fail(c, field, -1, "must be an array of strings");
	if (json_array_size(v) == 0)
		return cc_fail(c, field, -1, "must not be empty");
	for (size_t i = 0; i < json_array_size(v); i++)
		if (!json_is_string(json_array_get(v, i)))
			return cc_fail(c, field, (long)i, "must be a string");
	return 0;
}

static int parse_actions(struct cc *c, json_t *v, uint16_t *mask)
{
	size_t i;
	json_t *a;

	*mask = 0;
	json_array_foreach(v, i, a) {
		const char *s = json_string_value(a);
		size_t n = json_string_length(a);
		int act;
		if (n == 1 && s[0] == '*') {
			*mask |= (1u << TSEC_ACTION__COUNT) - 1;
		} else if (n == 9 && memcmp(s, "storage.*", 9) == 0) {
			*mask |= (1u << TSEC_ACTION_LOCK_ACQUIRE) - 1;
		} else if (n == 6 && memcmp(s, "lock.*", 6) == 0) {
			*mask |= (1u << TSEC_ACTION_LOCK_ACQUIRE) |
				 (1u << TSEC_ACTION_LOCK_RENEW) |
				 (1u << TSEC_ACTION_LOCK_RELEASE);
		} else if ((act = tsec__action_parse(s, n)) >= 0) {
			*mask |= (uint16_t)(1u << act);
		} else {
			return cc_fail(c, "action", (long)i, "unknown action '%s'", s);
		}
	}
	return 0;
}

static int uint_field(struct cc *c, json_t *v, const char *name, uint64_t *out)
{
	char field[64];

	snprintf(field, sizeof(field), "when/%s", name);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return cc_fail(c, field, -1, "must be a non-negative integer");
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_cert(struct cc *c, json_t *o, struct tsec__rule *r)
{
	const char *k;
	json_t *v, *t;
	uint64_t n;
	size_t i;
	int rc;

	if (!json_is_object(o))
		return cc_fail(c, "when/cert", -1, "must be an object");
	json_object_foreach(o, k, v) {
		if (!strcmp(k, "san_covers_domain")) {
			if (!json_is_boolean(v))
				return cc_fail(c, "when/cert/san_covers_domain", -1,
					       "must be true or false");
			if (json_is_true(v))
				r->cert |= TSEC__CERT_SAN;
		} else if (!strcmp(k, "min_remaining_s")) {
			if ((rc = uint_field(c, v, "cert/min_remaining_s", &n)))
				return rc;
			r->min_remaining_s = n;
			r->cert |= TSEC__CERT_REMAINING;
		} else if (!strcmp(k, "min_rsa_bits")) {
			if ((rc = uint_field(c, v, "cert/min_rsa_bits", &n)))
				return rc;
			if (n > 65536)
				return cc_fail(c, "when/cert/min_rsa_bits", -1,
					       "must be at most 65536");
			r->min_rsa_bits = (uint32_t)n;
			r->cert |= TSEC__CERT_RSA_BITS;
		} else if (!strcmp(k, "key_types")) {
			if ((rc = want_array(c, v, "when/cert/key_types")))
				return rc;
			json_array_foreach(v, i, t) {
				int kt = tsec__key_type_parse(json_string_value(t),
							      json_string_length(t));
				if (kt < 0)
					return cc_fail(c, "when/cert/key_types", (long)i,
						       "unknown key type '%s' (rsa, ec-p256, ec-p384, ed25519)",
						       json_string_value(t));
				r->key_types |= 1u << kt;
			}
			r->cert |= TSEC__CERT_KEY_TYPES;
		} else {
			char field[80];
			snprintf(field, sizeof(field), "when/cert/%s", k);
			return cc_fail(c, field, -1, "unknown certificate condition");
		}
	}
	return 0;
}

static int parse_when(struct cc *c, json_t *w, struct tsec__rule *r)
{
	const char *k;
	json_t *v;
	int rc;

	if (!json_is_object(w))
		return cc_fail(c, "when", -1, "must be an object");
	json_object_foreach(w, k, v) {
		if (strcmp(k, "ttl_ms_max") == 0) {
			if ((rc = uint_field(c, v, k, &r->ttl_ms_max)))
				return rc;
			r->when |= TSEC__WHEN_TTL_MAX;
		} else if (strcmp(k, "size_max") == 0) {
			if ((rc = uint_field(c, v, k, &r->size_max)))
				return rc;
			r->when |= TSEC__WHEN_SIZE_MAX;
		} else if (strcmp(k, "recursive") == 0) {
			if (!json_is_boolean(v))
				return cc_fail(c, "when/recursive", -1,
					       "must be true or false");
			r->recursive = json_is_true(v);
			r->when |= TSEC__WHEN_RECURSIVE;
		} else if (strcmp(k, "cert") == 0) {
			if ((rc = parse_cert(c, v, r)))
				return rc;
			r->when |= TSEC__WHEN_CERT;
		} else {
			char field[64];
			snprintf(field, sizeof(field), "when/%s", k);
			return cc_fail(c, field, -1, "unknown condition");
		}
	}
	return 0;
}

static int compile_rule(struct cc *c, json_t *obj, uint8_t effect)
{
	struct tsec__policy *pol = c->pol;
	struct tsec__rule *r;
	json_t *id = NULL, *eff = NULL, *prin = NULL, *act = NULL, *res = NULL,
	       *dom = NULL, *when = NULL, *v, *p;
	const char *k;
	uint32_t ri, slot;
	size_t i, j;
	bool found;
	int rc;

	if (!json_is_object(obj))
		return cc_fail(c, NULL, -1, "rule must be an object");
	json_object_foreach(obj, k, v) {
		if (!strcmp(k, "id")) id = v;
		else if (!strcmp(k, "effect")) eff = v;
		else if (!strcmp(k, "principal")) prin = v;
		else if (!strcmp(k, "action")) act = v;
		else if (!strcmp(k, "resource")) res = v;
		else if (!strcmp(k, "domain")) dom = v;
		else if (!strcmp(k, "when")) when = v;
		else if (!strcmp(k, "description")) {
			if (!json_is_string(v))
				return cc_fail(c, k, -1, "must be a string");
		} else
			return cc_fail(c, k, -1, "unknown field");
	}
	if (grow((void **)&pol->rules, &pol->cap_rules, pol->nrules + 1,
		 sizeof(*pol->rules)))
		return oom(c);
	ri = pol->nrules;
	r = &pol->rules[ri];
	memset(r, 0, sizeof(*r));
	r->order = ri;
	r->effect = effect;

	if (!id)
		return cc_fail(c, "id", -1, "missing rule id");
	if (!json_is_string(id) ||
	    !id_ok(json_string_value(id), json_string_length(id)))
		return cc_fail(c, "id", -1,
			       "id must be 1-63 characters of A-Z a-z 0-9 - _ . :");
	memcpy(r->id, json_string_value(id), json_string_length(id) + 1);
	slot = ri + 1;
	if (edge_put(pol, TSEC__NS_RULE_ID, r->id, strlen(r->id), &slot, &found))
		return oom(c);
	if (found)
		return cc_fail(c, "id", -1, "duplicate rule id '%s'", r->id);

	if (effect == TSEC_EFFECT_FLOOR) {
		if (eff && !(json_is_string(eff) &&
			     !strcmp(json_string_value(eff), "deny")))
			return cc_fail(c, "effect", -1,
				       "a floor rule can only deny");
	} else {
		if (!eff)
			return cc_fail(c, "effect", -1, "missing effect");
		if (json_is_string(eff) && !strcmp(json_string_value(eff), "allow"))
			r->effect = TSEC_EFFECT_ALLOW;
		else if (json_is_string(eff) && !strcmp(json_string_value(eff), "deny"))
			r->effect = TSEC_EFFECT_DENY;
		else
			return cc_fail(c, "effect", -1,
				       "effect must be \"allow\" or \"deny\"");
	}

	if (!act)
		return cc_fail(c, "action", -1, "missing action list");
	if ((rc = want_array(c, act, "action")) ||
	    (rc = parse_actions(c, act, &r->actions)))
		return rc;
	if (!res)
		return cc_fail(c, "resource", -1, "missing resource list");
	if ((rc = want_array(c, res, "resource")))
		return rc;
	if (prin) {
		if ((rc = want_array(c, prin, "principal")))
			return rc;
		json_array_foreach(prin, i, p) {
			const char *why = principal_bad(json_string_value(p),
							json_string_length(p));
			if (why)
				return cc_fail(c, "principal", (long)i, "%s", why);
		}
	}
	if (dom) {
		if ((rc = want_array(c, dom, "domain")))
			return rc;
		r->dom_first = pol->ndoms;
		json_array_foreach(dom, i, p) {
			const char *s = json_string_value(p);
			size_t n = json_string_length(p);
			const char *why = domain_bad(s, n);
			char low[DOMAIN_MAX];
			if (why)
				return cc_fail(c, "domain", (long)i, "%s", why);
			for (j = 0; j < n; j++)
				low[j] = (s[j] >= 'A' && s[j] <= 'Z') ?
					 (char)(s[j] + 32) : s[j];
			if (grow((void **)&pol->doms, &pol->cap_doms,
				 pol->ndoms + 1, sizeof(*pol->doms)) ||
			    arena_add(pol, low, n, &pol->doms[pol->ndoms].off))
				return oom(c);
			pol->doms[pol->ndoms++].len = (uint32_t)n;
		}
		r->dom_count = pol->ndoms - r->dom_first;
	}
	if (when && (rc = parse_when(c, when, r)))
		return rc;
	pol->nrules++;

	/* Index: every principal pattern times every resource pattern. */
	json_array_foreach(res, j, v) {
		const char *s = json_string_value(v);
		uint16_t off[TSEC_KEY_SEGMENTS], len[TSEC_KEY_SEGMENTS];
		unsigned nseg;
		const char *why = resource_bad(s, json_string_length(v), off,
					       len, &nseg);
		if (why)
			return cc_fail(c, "resource", (long)j, "%s", why);
		for (i = 0; i < (prin ? json_array_size(prin) : 1); i++) {
			const char *ps = prin ? json_string_value(json_array_get(prin, i)) : "*";
			size_t pn = prin ? json_string_length(json_array_get(prin, i)) : 1;
			uint32_t node;
			if (pn == 1 && ps[0] == '*')
				node = pol->any_root;
			else if (pn > 5 && !memcmp(ps, "role:", 5))
				rc = child_literal(pol, TSEC__NS_ROLE, ps + 5,
						   pn - 5, &node);
			else
				rc = child_literal(pol, TSEC__NS_PRINCIPAL, ps,
						   pn, &node);
			if (rc)
				return oom(c);
			for (unsigned sI = 0; sI < nseg && !rc; sI++) {
				const char *seg = s + off[sI];
				if (len[sI] == 2 && !memcmp(seg, "**", 2))
					rc = child_dstar(pol, node, &node);
				else if (memchr(seg, '*', len[sI]))
					rc = child_glob(pol, node, seg, len[sI], &node);
				else
					rc = child_literal(pol, node, seg, len[sI], &node);
			}
			if (rc || term_add(pol, node, ri))
				return oom(c);
		}
	}
	return 0;
}

void tsec__policy_free(struct tsec__policy **pp)
{
	struct tsec__policy *p;

	if (!pp || !*pp)
		return;
	p = *pp;
	free(p->rules);
	free(p->nodes);
	free(p->globs);
	free(p->terms);
	free(p->doms);
	free(p->edges);
	free(p->arena);
	free(p);
	*pp = NULL;
}

/* ---- the document, one rule at a time ---- */

/*
 * The policy is read as a stream of top-level members and, inside "floor"
 * and "rules", of single rules: jansson parses each member value and each
 * rule on its own (JSON_DISABLE_EOF_CHECK reports how many bytes it read)
 * and the tree is freed before the next rule.  Peak memory stays at one
 * rule's tree instead of the whole document's, and the allocator reuses
 * the same few hot chunks.  This file only checks the punctuation between
 * values; every value is parsed by jansson.
 */
#define JFLAGS (JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES)

struct doc {
	const char *base, *p, *end;
	struct tsec_error *err;
};

static void skip_ws(struct doc *d)
{
	while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' ||
				 *d->p == '\n' || *d->p == '\r'))
		d->p++;
}

/* A syntax error at the current position, with line and column. */
static int syntax(struct doc *d, const char *at, const char *what)
{
	int line = 1, col = 1;

	for (const char *q = d->base; q < at && q < d->end; q++) {
		if (*q == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	return tsec__seterr(d->err, TSEC_EPOLICY, "",
			    "JSON error at line %d column %d: %s", line, col, what);
}

static int expect(struct doc *d, char c, const char *what)
{
	skip_ws(d);
	if (d->p >= d->end || *d->p != c)
		return syntax(d, d->p, what);
	d->p++;
	return 0;
}

/* Parses one JSON value at the current position into *out (new ref). */
static int value(struct doc *d, json_t **out)
{
	json_error_t je;

	skip_ws(d);
	*out = json_loadb(d->p, (size_t)(d->end - d->p), JFLAGS, &je);
	if (!*out)
		return syntax(d, d->p + (je.position > 0 ? je.position : 0), je.text);
	d->p += je.position;
	return 0;
}

/*
 * Skips one value without building it, for the first pass: strings are
 * followed through their escapes and brackets are counted.  Returns NULL
 * on an unterminated value.  Only finds the end; the second pass has
 * jansson parse what was skipped.
 */
static const char *skip_value(const char *p, const char *end, size_t *items)
{
	int depth = 0;

	do {
		if (p >= end)
			return NULL;
		if (*p == '"') {
			for (p++; p < end && *p != '"'; p++)
				if (*p == '\\')
					p++;
			if (p >= end)
				return NULL;
			p++;
		} else if (*p == '[' || *p == '{') {
			/* Counts the elements of a top-level array, roughly:
			 * one per object that opens directly inside it. */
			if (depth == 1 && *p == '{' && items)
				(*items)++;
			depth++;
			p++;
		} else if (*p == ']' || *p == '}') {
			if (--depth < 0)
				return NULL;
			p++;
		} else if (depth == 0) {
			while (p < end && *p != ',' && *p != '}' && *p != ']' &&
			       *p != ' ' && *p != '\n' && *p != '\t' && *p != '\r')
				p++;
		} else {
			p++;
		}
	} while (depth > 0);
	return p;
}

/* Compiles the rules of one array member starting at d->p ('['). */
static int compile_array(struct cc *c, struct doc *d, const char *name,
			 uint8_t effect)
{
	json_t *v;
	int rc;

	skip_ws(d);
	if (d->p >= d->end || *d->p != '[')
		return cc_fail(c, name, -1, "must be an array of rules");
	d->p++;
	c->section = name;
	skip_ws(d);
	if (d->p < d->end && *d->p == ']') {
		d->p++;
		c->section = NULL;
		return 0;
	}
	for (c->index = 0;; c->index++) {
		if ((rc = value(d, &v)))
			return rc;
		rc = compile_rule(c, v, effect);
		json_decref(v);
		if (rc == TSEC_EPOLICY && c->errs) {
			if (c->nerrs < c->max)
				c->errs[c->nerrs] = *c->err;
			c->nerrs++;
			c->failed = true;
		} else if (rc) {
			return rc;
		}
		skip_ws(d);
		if (d->p < d->end && *d->p == ']') {
			d->p++;
			break;
		}
		if ((rc = expect(d, ',', "expected ',' or ']' after a rule")))
			return rc;
	}
	c->section = NULL;
	return 0;
}

/*
 * A new, empty policy with room for about `rules` rules, so that compiling
 * a large policy does not spend its time copying arrays as they grow.
 * The estimates are per rule of a typical policy; arrays still grow past
 * them when needed.
 */
static int policy_new(struct tsec__policy **out, size_t len, size_t rules)
{
	struct tsec__policy *pol = calloc(1, sizeof(*pol));
	uint32_t unused, slots = 64;

	if (rules > len / 16 || rules > (1u << 24))
		rules = len / 16 < (1u << 24) ? len / 16 : (1u << 24);
	while (slots < rules * 8)
		slots *= 2;

	*out = pol;
	if (!pol)
		return TSEC_ENOMEM;
	/* The seed only spreads hash slots; the policy itself is trusted. */
	pol->seed = 0x7473656370656c69ull ^ (uint64_t)len;
	/* Index 0 of nodes, globs and terms ends a list: reserve it. */
	if (edges_resize(pol, slots) ||
	    grow((void **)&pol->rules, &pol->cap_rules, (uint32_t)rules + 1,
		 sizeof(*pol->rules)) ||
	    grow((void **)&pol->nodes, &pol->cap_nodes, (uint32_t)rules * 4 + 2,
		 sizeof(*pol->nodes)) ||
	    grow((void **)&pol->terms, &pol->cap_terms, (uint32_t)rules * 2 + 1,
		 sizeof(*pol->terms)) ||
	    grow((void **)&pol->doms, &pol->cap_doms, (uint32_t)rules + 1,
		 sizeof(*pol->doms)) ||
	    grow((void **)&pol->globs, &pol->cap_globs, (uint32_t)rules + 1,
		 sizeof(*pol->globs)) ||
	    node_new(pol, &unused) || node_new(pol, &pol->any_root))
		return TSEC_ENOMEM;
	pol->arena_cap = rules * 48 + 4096;
	if (!(pol->arena = malloc(pol->arena_cap)))
		return TSEC_ENOMEM;
	pol->nglobs = 1;
	pol->nterms = 1;
	return 0;
}

static int compile(const char *text, size_t len, struct tsec__policy **out,
		   struct tsec_error *err, struct tsec_error *errs, size_t max,
		   size_t *nerrs);

int tsec__policy_compile(const char *text, size_t len,
			 struct tsec__policy **out, struct tsec_error *err)
{
	return compile(text, len, out, err, NULL, 0, NULL);
}

int tsec__policy_lint(const char *text, size_t len, struct tsec_error *errs,
		      size_t max, size_t *nerrs)
{
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	int rc;

	*nerrs = 0;
	memset(&err, 0, sizeof(err));
	rc = compile(text, len, &pol, &err, errs, max, nerrs);
	tsec__policy_free(&pol);
	if (rc && *nerrs == 0) {
		/* A fatal error outside any rule: that one alone. */
		if (max)
			errs[0] = err;
		*nerrs = 1;
	}
	return rc;
}

static int compile(const char *text, size_t len, struct tsec__policy **out,
		   struct tsec_error *err, struct tsec_error *errs, size_t max,
		   size_t *nerrs)
{
	struct doc d = { text, text, text + len, err };
	struct cc c = { NULL, err, NULL, 0, errs, max, 0, false };
	const char *floor_at = NULL, *rules_at = NULL;
	bool have_version = false, have_desc = false;
	size_t nitems = 0;
	json_t *key = NULL, *v = NULL;
	int rc;

	*out = NULL;
	if (!text && len)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL policy text");
	/*
	 * First pass: the top-level members.  "floor" and "rules" are only
	 * located here, so that the version is known before any rule is
	 * compiled, wherever it stands in the object.
	 */
	skip_ws(&d);
	if (d.p >= d.end || *d.p != '{') {
		if (d.p >= d.end || *d.p != '[')
			return syntax(&d, d.p, "expected a JSON object");
		return tsec__seterr(err, TSEC_EPOLICY, "", "policy must be a JSON object");
	}
	d.p++;
	skip_ws(&d);
	if (d.p < d.end && *d.p == '}')
		d.p++;
	else for (;;) {
		const char *k;
		if ((rc = value(&d, &key)))
			goto out;
		if (!json_is_string(key)) {
			rc = syntax(&d, d.p, "object key must be a string");
			goto out;
		}
		k = json_string_value(key);
		if ((rc = expect(&d, ':', "expected ':' after an object key")))
			goto out;
		skip_ws(&d);
		if (!strcmp(k, "floor") || !strcmp(k, "rules")) {
			const char **at = k[0] == 'f' ? &floor_at : &rules_at;
			const char *e = skip_value(d.p, d.end, &nitems);
			if (*at) {
				rc = syntax(&d, d.p, "duplicate object key");
				goto out;
			}
			if (!e) {
				rc = syntax(&d, d.p, "unterminated value");
				goto out;
			}
			*at = d.p;
			d.p = e;
		} else if (!strcmp(k, "version") || !strcmp(k, "description")) {
			bool *seen = k[0] == 'v' ? &have_version : &have_desc;
			if (*seen) {
				rc = syntax(&d, d.p, "duplicate object key");
				goto out;
			}
			*seen = true;
			if ((rc = value(&d, &v)))
				goto out;
			if (k[0] == 'v' && (!json_is_integer(v) || json_integer_value(v) != 1)) {
				rc = cc_fail(&c, "version", -1,
					     "unsupported version (this module reads version 1)");
				goto out;
			}
			if (k[0] == 'd' && !json_is_string(v)) {
				rc = cc_fail(&c, "description", -1, "must be a string");
				goto out;
			}
			json_decref(v);
			v = NULL;
		} else {
			rc = cc_fail(&c, k, -1, "unknown field");
			goto out;
		}
		json_decref(key);
		key = NULL;
		skip_ws(&d);
		if (d.p < d.end && *d.p == '}') {
			d.p++;
			break;
		}
		if ((rc = expect(&d, ',', "expected ',' or '}' after a member")))
			goto out;
	}
	skip_ws(&d);
	if (d.p != d.end) {
		rc = syntax(&d, d.p, "end of file expected");
		goto out;
	}
	if (!have_version) {
		rc = cc_fail(&c, "version", -1, "missing version");
		goto out;
	}

	/* Second pass: compile the rules where the first pass found them. */
	if ((rc = policy_new(&c.pol, len, nitems))) {
		rc = oom(&c);
		goto out;
	}
	if (floor_at) {
		d.p = floor_at;
		if ((rc = compile_array(&c, &d, "floor", TSEC_EFFECT_FLOOR)))
			goto out;
	}
	if (rules_at) {
		d.p = rules_at;
		if ((rc = compile_array(&c, &d, "rules", TSEC_EFFECT_ALLOW)))
			goto out;
	}
	if (c.failed) {
		/* Lint went on past errors; report the first as the result. */
		if (max)
			*err = errs[0];
		rc = TSEC_EPOLICY;
		goto out;
	}
	*out = c.pol;
	c.pol = NULL;
	rc = 0;
out:
	if (nerrs && c.nerrs)
		*nerrs = c.nerrs;
	json_decref(key);
	json_decref(v);
	tsec__policy_free(&c.pol);
	return rc;
}
