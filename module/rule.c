/*
 * One rule: its fields checked (each error with its JSON place), then
 * indexed into the tries of its principals.
 */
#include <stdio.h>
#include <string.h>

#include "module/compile_private.h"
#include "common/suggest.h"

#define PRINCIPAL_MAX 255
#define DOMAIN_MAX 253
#define DSTAR_MAX 2

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

/*
 * A bad entry of a list or a bad condition: compiling, the first ends
 * the compile (its error is the answer); linting (c->errs), it is kept
 * and the next entry looked at, so that lint says every one.  `first`
 * keeps the first error; the function returns it after its loop.
 */
#define ENTRY(first, expr) do { \
		int e_ = (expr); \
		if (e_ && (!c->errs || e_ != TSEC_EPOLICY)) \
			return e_; \
		if (e_ && !(first)) \
			(first) = e_; \
	} while (0)

/* An unknown name's error, with the nearest known name when one is near. */
static int unknown_name(struct tsec__cc *c, const char *field, const char *what,
			const char *name, const char *const *known, unsigned n)
{
	const char *near = tsec__nearest(name, known, n);

	return tsec__cc_fail(c, field, -1, "unknown %s%s%s%s", what,
			     near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
}

static int want_array(struct tsec__cc *c, json_t *v, const char *field)
{
	int first = 0;

	if (!json_is_array(v))
		return tsec__cc_fail(c, field, -1, "must be an array of strings");
	if (json_array_size(v) == 0)
		return tsec__cc_fail(c, field, -1, "must not be empty");
	for (size_t i = 0; i < json_array_size(v); i++)
		if (!json_is_string(json_array_get(v, i)))
			ENTRY(first, tsec__cc_fail(c, field, (long)i, "must be a string"));
	return first;
}

static int parse_actions(struct tsec__cc *c, json_t *v, uint16_t *mask)
{
	size_t i;
	json_t *a;
	int first = 0;

	*mask = 0;
	json_array_foreach(v, i, a) {
		const char *s = json_string_value(a);
		size_t n = json_string_length(a);
		int act;
		if (n == 1 && s[0] == '*') {
			*mask |= (1u << TSEC_ACTION__COUNT) - 1;
		} else if (tsec_action_family(s, n)) {
			*mask |= (uint16_t)tsec_action_family(s, n);
		} else if ((act = tsec__action_parse(s, n)) >= 0) {
			*mask |= (uint16_t)(1u << act);
		} else {
			const char *names[TSEC_ACTION__COUNT + 4], *near;
			unsigned m = 0;

			for (unsigned x = 0; x < TSEC_ACTION__COUNT; x++)
				names[m++] = tsec_action_name(x);
			names[m++] = "storage.*";
			names[m++] = "lock.*";
			names[m++] = "cert.*";
			names[m++] = "*";
			near = tsec__nearest(s, names, m);
			ENTRY(first, tsec__cc_fail(c, "action", (long)i, "unknown action '%s'%s%s%s",
						   s, near ? "; did you mean '" : "",
						   near ? near : "", near ? "'?" : ""));
		}
	}
	return first;
}

static int uint_field(struct tsec__cc *c, json_t *v, const char *name, uint64_t *out)
{
	char field[64];

	snprintf(field, sizeof(field), "when/%s", name);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return tsec__cc_fail(c, field, -1, "must be a non-negative integer");
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_cert(struct tsec__cc *c, json_t *o, struct tsec__rule *r)
{
	const char *k;
	json_t *v, *t;
	static const char *const known[] = { "san_covers_domain", "min_remaining_s",
					      "min_rsa_bits", "key_types" };
	uint64_t n = 0;
	size_t i;
	int first = 0;

	if (!json_is_object(o))
		return tsec__cc_fail(c, "when/cert", -1, "must be an object");
	json_object_foreach(o, k, v) {
		if (!strcmp(k, "san_covers_domain")) {
			if (!json_is_boolean(v))
				ENTRY(first, tsec__cc_fail(c, "when/cert/san_covers_domain", -1,
							   "must be true or false"));
			else if (json_is_true(v))
				r->cert |= TSEC__CERT_SAN;
		} else if (!strcmp(k, "min_remaining_s")) {
			int rc = uint_field(c, v, "cert/min_remaining_s", &n);

			ENTRY(first, rc);
			if (!rc) {
				r->min_remaining_s = n;
				r->cert |= TSEC__CERT_REMAINING;
			}
		} else if (!strcmp(k, "min_rsa_bits")) {
			int rc = uint_field(c, v, "cert/min_rsa_bits", &n);

			if (!rc && n > 65536)
				rc = tsec__cc_fail(c, "when/cert/min_rsa_bits", -1,
						   "must be at most 65536");
			ENTRY(first, rc);
			if (!rc) {
				r->min_rsa_bits = (uint32_t)n;
				r->cert |= TSEC__CERT_RSA_BITS;
			}
		} else if (!strcmp(k, "key_types")) {
			int rc = want_array(c, v, "when/cert/key_types");

			ENTRY(first, rc);
			if (rc)
				continue;
			json_array_foreach(v, i, t) {
				int kt = tsec__key_type_parse(json_string_value(t),
							      json_string_length(t));
				if (kt < 0)
					ENTRY(first, tsec__cc_fail(c, "when/cert/key_types", (long)i,
						"unknown key type '%s' (rsa, ec-p256, ec-p384, ed25519)",
						json_string_value(t)));
				else
					r->key_types |= 1u << kt;
			}
			r->cert |= TSEC__CERT_KEY_TYPES;
		} else {
			char field[80];

			snprintf(field, sizeof(field), "when/cert/%s", k);
			ENTRY(first, unknown_name(c, field, "certificate condition", k, known,
						  sizeof(known) / sizeof(known[0])));
		}
	}
	return first;
}

/*
 * "rate": {"max_new": N, "window_s": W}: at most N names this rule has
 * not allowed before, per principal and registrable suffix, in any W
 * seconds.  Only an allow of cert.obtain can carry it (checked once the
 * rule is read): the broker counts it on its shared storage.
 */
static int parse_rate(struct tsec__cc *c, json_t *o, struct tsec__rule *r)
{
	json_t *mx = json_object_get(o, "max_new"), *win = json_object_get(o, "window_s");
	const char *k;
	json_t *v;
	int first = 0;

	if (!json_is_object(o))
		return tsec__cc_fail(c, "when/rate", -1, "must be an object: {\"max_new\": N, "
				     "\"window_s\": SECONDS}");
	json_object_foreach(o, k, v) {
		static const char *const known[] = { "max_new", "window_s" };

		if (strcmp(k, "max_new") && strcmp(k, "window_s")) {
			char field[80];

			snprintf(field, sizeof(field), "when/rate/%s", k);
			ENTRY(first, unknown_name(c, field, "rate member", k, known, 2));
		}
	}
	if (!json_is_integer(mx) || json_integer_value(mx) < 1 ||
	    json_integer_value(mx) > TSEC_RATE_MAX_NEW)
		ENTRY(first, tsec__cc_fail(c, "when/rate/max_new", -1,
					   "must be an integer from 1 to %d", TSEC_RATE_MAX_NEW));
	if (!json_is_integer(win) || json_integer_value(win) < 1 ||
	    json_integer_value(win) > TSEC_RATE_MAX_WINDOW_S)
		ENTRY(first, tsec__cc_fail(c, "when/rate/window_s", -1,
					   "must be an integer from 1 to %d (a year)",
					   TSEC_RATE_MAX_WINDOW_S));
	if (!first) {
		r->rate_max = (uint32_t)json_integer_value(mx);
		r->rate_window_s = (uint32_t)json_integer_value(win);
	}
	return first;
}

/* Each condition of "when" read into r (k its name, v its value): 0, or
 * the compile error.  parse_when sets its bit. */
static int when_ttl_ms_max(struct tsec__cc *c, json_t *v, const char *k, struct tsec__rule *r)
{
	return uint_field(c, v, k, &r->ttl_ms_max);
}

static int when_size_max(struct tsec__cc *c, json_t *v, const char *k, struct tsec__rule *r)
{
	return uint_field(c, v, k, &r->size_max);
}

static int when_recursive(struct tsec__cc *c, json_t *v, const char *k, struct tsec__rule *r)
{
	(void)k;
	if (!json_is_boolean(v))
		return tsec__cc_fail(c, "when/recursive", -1, "must be true or false");
	r->recursive = json_is_true(v);
	return 0;
}

static int when_cert(struct tsec__cc *c, json_t *v, const char *k, struct tsec__rule *r)
{
	(void)k;
	return parse_cert(c, v, r);
}

static int when_rate(struct tsec__cc *c, json_t *v, const char *k, struct tsec__rule *r)
{
	(void)k;
	return parse_rate(c, v, r);
}

/*
 * The conditions of "when" are TSEC_CONDITIONS (types.h): the name a
 * policy writes, and here its reader, when_<id> (issue 53, item 3: the
 * names were listed again for "did you mean", in lint and in diff).  The
 * walk and the why-not test the context's with one predicate,
 * tsec__when_fails (module_private.h).
 */
static int parse_when(struct tsec__cc *c, json_t *w, struct tsec__rule *r)
{
#define WHEN_NAME(id, name, carried, bound, lo) name,
#define WHEN_READ(id, name, carried, bound, lo) when_##id,
	static const char *const names[] = { TSEC_CONDITIONS(WHEN_NAME) };
	static int (*const readers[])(struct tsec__cc *, json_t *, const char *,
				      struct tsec__rule *) = { TSEC_CONDITIONS(WHEN_READ) };
#undef WHEN_NAME
#undef WHEN_READ
	const unsigned n = sizeof(names) / sizeof(names[0]);
	const char *k;
	json_t *v;
	int first = 0;

	if (!json_is_object(w))
		return tsec__cc_fail(c, "when", -1, "must be an object");
	json_object_foreach(w, k, v) {
		unsigned i = 0;
		int rc;

		while (i < n && strcmp(k, names[i]))
			i++;
		if (i < n) {
			rc = readers[i](c, v, k, r);
			r->when |= rc ? 0 : 1u << i;
		} else {
			char field[64];

			snprintf(field, sizeof(field), "when/%s", k);
			rc = unknown_name(c, field, "condition", k, names, n);
		}
		ENTRY(first, rc);
	}
	return first;
}

/* The members of one rule object, borrowed from it. */
struct rule_json {
	json_t *id, *eff, *prin, *act, *res, *dom, *when, *exc;
};

/* Sorts the members into j; refuses unknown ones. */
static int rule_members(struct tsec__cc *c, json_t *obj, struct rule_json *j, bool *bad)
{
	const char *k;
	json_t *v;

	memset(j, 0, sizeof(*j));
	if (!json_is_object(obj))
		return tsec__cc_fail(c, NULL, -1, "rule must be an object");
	json_object_foreach(obj, k, v) {
		if (!strcmp(k, "id")) j->id = v;
		else if (!strcmp(k, "effect")) j->eff = v;
		else if (!strcmp(k, "principal")) j->prin = v;
		else if (!strcmp(k, "action")) j->act = v;
		else if (!strcmp(k, "resource")) j->res = v;
		else if (!strcmp(k, "domain")) j->dom = v;
		else if (!strcmp(k, "when")) j->when = v;
		else if (!strcmp(k, "except")) j->exc = v;
		else if (!strcmp(k, "description")) {
			if (!json_is_string(v) && (tsec__cc_fail(c, k, -1, "must be a string"),
						   *bad = true, !c->errs))
				return TSEC_EPOLICY;
		} else {
			static const char *const fields[] = {
				"id", "effect", "principal", "action", "resource", "domain", "when",
				"except", "description",
			};
			const char *near = tsec__nearest(k, fields, sizeof(fields) / sizeof(fields[0]));

			tsec__cc_fail(c, k, -1, "unknown field%s%s%s", near ? "; did you mean \"" : "",
				      near ? near : "", near ? "\"?" : "");
			*bad = true;
			if (!c->errs)
				return TSEC_EPOLICY;
		}
	}
	return 0;
}

/* The rule's id: well formed and not used before. */
static int parse_id(struct tsec__cc *c, json_t *id, struct tsec__rule *r, uint32_t ri)
{
	uint32_t slot = ri + 1;
	bool found;

	if (!id)
		return tsec__cc_fail(c, "id", -1, "missing rule id");
	if (!json_is_string(id) ||
	    !id_ok(json_string_value(id), json_string_length(id)))
		return tsec__cc_fail(c, "id", -1,
				     "id must be 1-63 characters of A-Z a-z 0-9 - _ . :");
	memcpy(r->id, json_string_value(id), json_string_length(id) + 1);
	if (tsec__edge_put(c->pol, TSEC__NS_RULE_ID, r->id, strlen(r->id), &slot, &found))
		return tsec__cc_oom(c);
	if (found)
		return tsec__cc_fail(c, "id", -1, "duplicate rule id '%s'", r->id);
	return 0;
}

/* The effect: a floor may only deny; a rule must say allow or deny. */
static int parse_effect(struct tsec__cc *c, json_t *eff, uint8_t section,
			struct tsec__rule *r)
{
	if (section == TSEC_EFFECT_FLOOR) {
		if (eff && !(json_is_string(eff) && !strcmp(json_string_value(eff), "deny")))
			return tsec__cc_fail(c, "effect", -1, "a floor rule can only deny");
		return 0;
	}
	if (!eff)
		return tsec__cc_fail(c, "effect", -1, "missing effect");
	if (json_is_string(eff) && !strcmp(json_string_value(eff), "allow"))
		r->effect = TSEC_EFFECT_ALLOW;
	else if (json_is_string(eff) && !strcmp(json_string_value(eff), "deny"))
		r->effect = TSEC_EFFECT_DENY;
	else {
		static const char *const effects[] = { "allow", "deny" };
		const char *near = json_is_string(eff)
				   ? tsec__nearest(json_string_value(eff), effects, 2) : NULL;

		return tsec__cc_fail(c, "effect", -1, "effect must be \"allow\" or \"deny\"%s%s%s "
				     "(floors go in \"floor\")", near ? "; did you mean \"" : "",
				     near ? near : "", near ? "\"?" : "");
	}
	return 0;
}

static int parse_principals(struct tsec__cc *c, json_t *prin)
{
	json_t *p;
	size_t i;
	int rc, first = 0;

	if (!prin)
		return 0;
	/* Linting, the strings of a list that holds a non-string are still
	 * looked at. */
	if ((rc = want_array(c, prin, "principal")) &&
	    (!c->errs || !json_is_array(prin) || !json_array_size(prin)))
		return rc;
	first = rc;
	json_array_foreach(prin, i, p) {
		const char *why = json_is_string(p)
			? principal_bad(json_string_value(p), json_string_length(p)) : NULL;
		if (why)
			ENTRY(first, tsec__cc_fail(c, "principal", (long)i, "%s", why));
	}
	return first;
}

/* The domains, lower-cased into the arena as the rule's dom_first.. run. */
static int parse_domains(struct tsec__cc *c, json_t *dom, struct tsec__rule *r)
{
	struct tsec__policy *pol = c->pol;
	json_t *p;
	size_t i;
	int rc, first = 0;

	if (!dom)
		return 0;
	if ((rc = want_array(c, dom, "domain")) &&
	    (!c->errs || !json_is_array(dom) || !json_array_size(dom)))
		return rc;
	first = rc;
	r->dom_first = pol->ndoms;
	json_array_foreach(dom, i, p) {
		const char *s = json_string_value(p);
		size_t n = json_string_length(p);
		const char *why;
		char low[DOMAIN_MAX];

		if (!s)
			continue;            /* said by want_array */
		why = domain_bad(s, n);
		if (why) {
			ENTRY(first, tsec__cc_fail(c, "domain", (long)i, "%s", why));
			continue;
		}
		for (size_t j = 0; j < n; j++)
			low[j] = (s[j] >= 'A' && s[j] <= 'Z') ? (char)(s[j] + 32) : s[j];
		if (tsec__grow((void **)&pol->doms, &pol->cap_doms, pol->ndoms + 1,
			       sizeof(*pol->doms)) ||
		    tsec__arena_add(pol, low, n, &pol->doms[pol->ndoms].off))
			return tsec__cc_oom(c);
		/* domain_bad allows '*' only as a whole label. */
		pol->doms[pol->ndoms].star = memchr(low, '*', n) != NULL;
		pol->doms[pol->ndoms++].len = (uint32_t)n;
	}
	r->dom_count = pol->ndoms - r->dom_first;
	return first;
}

/*
 * "except" (floors and deny rules): principals ("svc:tls-server") and
 * roles ("role:NAME") the rule does not bind, so that "nobody but X"
 * is one floor (issue 51, item 4; Cedar's unless, OPA's not).
 */
static int parse_except(struct tsec__cc *c, json_t *exc, struct tsec__rule *r)
{
	struct tsec__policy *pol = c->pol;
	json_t *p;
	size_t i;
	int rc, first = 0;

	if (!exc)
		return 0;
	if (r->effect == TSEC_EFFECT_ALLOW)
		return tsec__cc_fail(c, "except", -1, "an allow takes no \"except\": name the "
				     "principals it allows; \"except\" narrows a floor or a deny");
	if ((rc = want_array(c, exc, "except")))
		return rc;
	r->exc_first = pol->nexcs;
	json_array_foreach(exc, i, p) {
		const char *s = json_string_value(p), *why;
		size_t n = json_string_length(p);
		bool role = n > 5 && !memcmp(s, "role:", 5);

		why = !strcmp(s, "*") ? "\"*\" would except everyone: remove the rule instead"
		      : principal_bad(s, n);
		if (why) {
			ENTRY(first, tsec__cc_fail(c, "except", (long)i, "%s", why));
			continue;
		}
		if (tsec__grow((void **)&pol->excs, &pol->cap_excs, pol->nexcs + 1,
			       sizeof(*pol->excs)) ||
		    tsec__arena_add(pol, role ? s + 5 : s, role ? n - 5 : n,
				    &pol->excs[pol->nexcs].off))
			return tsec__cc_oom(c);
		pol->excs[pol->nexcs].star = role;
		pol->excs[pol->nexcs++].len = (uint32_t)(role ? n - 5 : n);
	}
	r->exc_count = pol->nexcs - r->exc_first;
	return first;
}

/*
 * Parses one rule into the next slot of pol->rules (counted in nrules
 * only when every field is good), leaving j for the index.  Compiling,
 * the first bad field ends it; linting (c->errs), every field is checked
 * and *bad says whether any was wrong, each said by tsec__cc_fail.
 */
static int parse_rule(struct tsec__cc *c, json_t *obj, uint8_t effect,
		      struct rule_json *j, bool *bad)
{
	struct tsec__policy *pol = c->pol;
	struct tsec__rule *r;
	uint32_t ri;
	int rc;

/* A field's error: the end when compiling, noted when linting. */
#define FIELD(expr) do { \
		if ((rc = (expr)) == TSEC_EPOLICY && c->errs) \
			*bad = true; \
		else if (rc) \
			return rc; \
	} while (0)

	*bad = false;
	if ((rc = rule_members(c, obj, j, bad)))
		return rc;
	if (tsec__grow((void **)&pol->rules, &pol->cap_rules, pol->nrules + 1,
		       sizeof(*pol->rules)))
		return tsec__cc_oom(c);
	ri = pol->nrules;
	r = &pol->rules[ri];
	memset(r, 0, sizeof(*r));
	r->order = ri;
	r->effect = effect;
	FIELD(parse_id(c, j->id, r, ri));
	FIELD(parse_effect(c, j->eff, effect, r));
	if (!j->act)
		FIELD(tsec__cc_fail(c, "action", -1, "missing action list"));
	else if (!(rc = want_array(c, j->act, "action")))
		FIELD(parse_actions(c, j->act, &r->actions));
	else
		FIELD(rc);
	if (!j->res)
		FIELD(tsec__cc_fail(c, "resource", -1, "missing resource list"));
	else
		FIELD(want_array(c, j->res, "resource"));
	FIELD(parse_principals(c, j->prin));
	FIELD(parse_domains(c, j->dom, r));
	if (j->when)
		FIELD(parse_when(c, j->when, r));
	FIELD(parse_except(c, j->exc, r));
	if ((r->when & TSEC__WHEN_RATE) &&
	    (r->effect != TSEC_EFFECT_ALLOW || r->actions != 1u << TSEC_ACTION_CERT_OBTAIN))
		FIELD(tsec__cc_fail(c, "when/rate", -1, "a rate bounds an allow of cert.obtain "
				    "only: give this rule the action [\"cert.obtain\"] alone"));
#undef FIELD
	if (*bad)
		return 0;
	pol->nrules++;
	return 0;
}

/* The trie root of one principal pattern: "*", "role:NAME" or an id. */
static int principal_root(struct tsec__policy *pol, const char *ps, size_t pn,
			  uint32_t *node)
{
	if (pn == 1 && ps[0] == '*') {
		*node = pol->any_root;
		return 0;
	}
	if (pn > 5 && !memcmp(ps, "role:", 5))
		return tsec__child_literal(pol, TSEC__NS_ROLE, ps + 5, pn - 5, node);
	return tsec__child_literal(pol, TSEC__NS_PRINCIPAL, ps, pn, node);
}

/* Indexes one resource pattern s under `node`, ending at rule ri. */
static int index_pattern(struct tsec__cc *c, uint32_t node, const char *s,
			 const uint16_t *off, const uint16_t *len, unsigned nseg, uint32_t ri)
{
	struct tsec__policy *pol = c->pol;
	int rc = 0;

	for (unsigned si = 0; si < nseg && !rc; si++) {
		const char *seg = s + off[si];
		if (len[si] == 2 && !memcmp(seg, "**", 2))
			rc = tsec__child_dstar(pol, node, &node);
		else if (memchr(seg, '*', len[si]))
			rc = tsec__child_glob(pol, node, seg, len[si], &node);
		else
			rc = tsec__child_literal(pol, node, seg, len[si], &node);
	}
	if (rc || tsec__term_add(pol, node, ri))
		return tsec__cc_oom(c);
	if (pol->nnodes > TSEC__NODES_MAX || pol->nterms > TSEC__TERMS_MAX)
		return TSEC_EPOLICY;
	return 0;
}

/*
 * Indexes rule ri.  With one principal pattern, its resources go into
 * that principal's trie.  With several, they go once into a trie of the
 * rule's own, and each principal's root jumps there: nodes grow with
 * principals plus resources, never their product.
 */
static int index_rule(struct tsec__cc *c, uint32_t ri, const struct rule_json *j)
{
	struct tsec__policy *pol = c->pol;
	size_t np = j->prin ? json_array_size(j->prin) : 1, i, k;
	uint32_t shared = 0;
	json_t *v;
	int rc;

	if (np > 1 && tsec__node_new(pol, &shared))
		return tsec__cc_oom(c);
	json_array_foreach(j->res, k, v) {
		const char *s = json_string_value(v);
		uint16_t off[TSEC_KEY_SEGMENTS], len[TSEC_KEY_SEGMENTS];
		unsigned nseg;
		const char *why = resource_bad(s, json_string_length(v), off, len, &nseg);
		if (why)
			return tsec__cc_fail(c, "resource", (long)k, "%s", why);
		for (i = 0; i < (shared ? 1 : np); i++) {
			json_t *pj = j->prin ? json_array_get(j->prin, i) : NULL;
			uint32_t node = shared;
			if (!shared && principal_root(pol, pj ? json_string_value(pj) : "*",
						      pj ? json_string_length(pj) : 1, &node))
				return tsec__cc_oom(c);
			rc = index_pattern(c, node, s, off, len, nseg, ri);
			if (rc == TSEC_EPOLICY)
				return tsec__cc_fail(c, "resource", (long)k,
						     "the compiled policy passes its bound (%u trie "
						     "nodes, %u entries); split the policy",
						     TSEC__NODES_MAX, TSEC__TERMS_MAX);
			if (rc)
				return rc;
		}
	}
	for (i = 0; shared && i < np; i++) {
		json_t *pj = json_array_get(j->prin, i);
		uint32_t root;
		if (principal_root(pol, json_string_value(pj), json_string_length(pj), &root) ||
		    tsec__jump_add(pol, root, shared))
			return tsec__cc_oom(c);
	}
	return 0;
}

/* Lint, for a rule with a bad field: its resource patterns still said. */
static int resources_checked(struct tsec__cc *c, const struct rule_json *j)
{
	uint16_t off[TSEC_KEY_SEGMENTS], len[TSEC_KEY_SEGMENTS];
	unsigned nseg;
	json_t *v;
	size_t k;

	if (!json_is_array(j->res))
		return TSEC_EPOLICY;
	json_array_foreach(j->res, k, v) {
		const char *why = json_is_string(v)
			? resource_bad(json_string_value(v), json_string_length(v), off, len, &nseg)
			: NULL;
		if (why)
			tsec__cc_fail(c, "resource", (long)k, "%s", why);
	}
	return TSEC_EPOLICY;
}

int tsec__rule_compile(struct tsec__cc *c, json_t *obj, uint8_t effect)
{
	struct rule_json j;
	uint32_t ri = c->pol->nrules;
	bool bad;
	int rc = parse_rule(c, obj, effect, &j, &bad);

	if (rc)
		return rc;
	return bad ? resources_checked(c, &j) : index_rule(c, ri, &j);
}
