/*
 * Policy compiler: JSON (jansson) in, indexed tables out.
 *
 * Each principal pattern (an id, a role, or "*") owns a trie over resource
 * pattern segments.  Literal segments are edges in one hash table shared by
 * all tries; glob segments hang off their node in a short list; "**" is a
 * dedicated child.  Terminal entries name rules.  Evaluation walks only the
 * tries of the request's principal, roles and "*", and in each only the
 * branches the key can take, so rules that cannot match cost nothing.
 *
 * This file reads the document's top level and drives the rest:
 * reader.c (the document, one value at a time), rule.c (one rule, parsed
 * then indexed) and tables.c (the tables).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module/compile_private.h"
#include "common/clock.h"
#include "common/suggest.h"

int tsec__cc_fail(struct tsec__cc *c, const char *field, long sub, const char *fmt, ...)
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
	tsec__seterr(c->err, TSEC_EPOLICY, where, "%s", msg);
	if (c->errs) {
		/* Lint: every error is kept, in order. */
		if (c->nerrs < c->max)
			c->errs[c->nerrs] = *c->err;
		c->nerrs++;
		c->failed = true;
	}
	return TSEC_EPOLICY;
}

int tsec__cc_oom(struct tsec__cc *c)
{
	return tsec__seterr(c->err, TSEC_ENOMEM, "", "out of memory compiling policy");
}

/* Compiles the rules of one array member starting at d->p ('['). */
static int compile_array(struct tsec__cc *c, struct tsec__doc *d, const char *name,
			 uint8_t effect)
{
	json_t *v;
	int rc;

	tsec__doc_skip_ws(d);
	if (d->p >= d->end || *d->p != '[')
		return tsec__cc_fail(c, name, -1, "must be an array of rules");
	d->p++;
	c->section = name;
	tsec__doc_skip_ws(d);
	if (d->p < d->end && *d->p == ']') {
		d->p++;
		c->section = NULL;
		return 0;
	}
	for (c->index = 0;; c->index++) {
		if ((rc = tsec__doc_value(d, &v)))
			return rc;
		rc = tsec__rule_compile(c, v, effect);
		json_decref(v);
		/* Lint: the rule's errors are kept (tsec__cc_fail); go on. */
		if (rc && !(rc == TSEC_EPOLICY && c->errs))
			return rc;
		tsec__doc_skip_ws(d);
		if (d->p < d->end && *d->p == ']') {
			d->p++;
			break;
		}
		if ((rc = tsec__doc_expect(d, ',', "expected ',' or ']' after a rule")))
			return rc;
	}
	c->section = NULL;
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

/* The top-level members of a policy, each found by its whole name. */
enum top_member {
	TOP_VERSION, TOP_DESCRIPTION, TOP_REVISION, TOP_FLEET, TOP_EXPIRES, TOP_FLOOR,
	TOP_RULES, TOP__COUNT
};

static const char *const top_names[TOP__COUNT] = {
	"version", "description", "revision", "fleet", "expires", "floor", "rules",
};

static int top_member(const char *k)
{
	for (int i = 0; i < TOP__COUNT; i++)
		if (!strcmp(k, top_names[i]))
			return i;
	return -1;
}

/* Checks one scalar top-level member (the rules are compiled later). */
static int top_scalar(struct tsec__cc *c, int member, json_t *v)
{
	switch (member) {
	case TOP_VERSION:
		if (!json_is_integer(v) || json_integer_value(v) != 1)
			return tsec__cc_fail(c, "version", -1,
					     "unsupported version (this module reads version 1)");
		return 0;
	case TOP_DESCRIPTION:
		return json_is_string(v) ? 0 : tsec__cc_fail(c, "description", -1,
							     "must be a string");
	case TOP_REVISION:
		/* The revision is the broker's (no rollback); checked here. */
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return tsec__cc_fail(c, "revision", -1, "must be a non-negative integer");
		return 0;
	case TOP_FLEET:
		/* The fleet a signed bundle is for, and when it stops being
		 * served: the broker's (fleet.c); checked here. */
		if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 64)
			return tsec__cc_fail(c, "fleet", -1, "must be a name of 1 to 64 characters");
		return 0;
	case TOP_EXPIRES:
		if (!json_is_string(v) || tsec__utc_parse(json_string_value(v)) < 0)
			return tsec__cc_fail(c, "expires", -1, "must be a UTC time as "
					     "\"YYYY-MM-DDTHH:MM:SSZ\"");
		return 0;
	}
	return 0;
}

/*
 * One top-level member, at d->p: a scalar read and checked now; "floor"
 * and "rules" only located (*floor_at, *rules_at; their items counted
 * into *nitems), to be compiled once the version is known.
 */
static int top_one(struct tsec__doc *d, struct tsec__cc *c, bool seen[TOP__COUNT],
		   const char **floor_at, const char **rules_at, size_t *nitems)
{
	json_t *key = NULL, *v = NULL;
	const char *k, *e, *near;
	int member, rc;

	if ((rc = tsec__doc_value(d, &key)))
		return rc;
	if (!json_is_string(key)) {
		rc = tsec__doc_syntax(d, d->p, "object key must be a string");
		goto out;
	}
	k = json_string_value(key);
	if ((rc = tsec__doc_expect(d, ':', "expected ':' after an object key")))
		goto out;
	tsec__doc_skip_ws(d);
	member = top_member(k);
	if (member >= 0 && seen[member]) {
		rc = tsec__doc_syntax(d, d->p, "duplicate object key");
		goto out;
	}
	if (member >= 0)
		seen[member] = true;
	switch (member) {
	case TOP_FLOOR:
	case TOP_RULES:
		if (!(e = tsec__doc_skip_value(d->p, d->end, nitems))) {
			rc = tsec__doc_syntax(d, d->p, "unterminated value");
			goto out;
		}
		*(member == TOP_FLOOR ? floor_at : rules_at) = d->p;
		d->p = e;
		break;
	case TOP_VERSION:
	case TOP_DESCRIPTION:
	case TOP_REVISION:
	case TOP_FLEET:
	case TOP_EXPIRES:
		if (!(rc = tsec__doc_value(d, &v)))
			rc = top_scalar(c, member, v);
		break;
	default:
		near = tsec__nearest(k, top_names, TOP__COUNT);
		rc = tsec__cc_fail(c, k, -1, "unknown field%s%s%s",
				   near ? "; did you mean \"" : "", near ? near : "",
				   near ? "\"?" : "");
		break;
	}
out:
	json_decref(key);
	json_decref(v);
	return rc;
}

static int compile(const char *text, size_t len, struct tsec__policy **out,
		   struct tsec_error *err, struct tsec_error *errs, size_t max,
		   size_t *nerrs)
{
	struct tsec__doc d = { text, text, text + len, err };
	struct tsec__cc c = { NULL, err, NULL, 0, errs, max, 0, false };
	const char *floor_at = NULL, *rules_at = NULL;
	bool seen[TOP__COUNT] = { false };
	size_t nitems = 0;
	int rc;

	*out = NULL;
	if (!text && len)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL policy text");
	/*
	 * First pass: the top-level members.  "floor" and "rules" are only
	 * located here, so that the version is known before any rule is
	 * compiled, wherever it stands in the object.
	 */
	tsec__doc_skip_ws(&d);
	if (d.p >= d.end || *d.p != '{') {
		if (d.p >= d.end || *d.p != '[')
			return tsec__doc_syntax(&d, d.p, "expected a JSON object");
		return tsec__seterr(err, TSEC_EPOLICY, "", "policy must be a JSON object");
	}
	d.p++;
	tsec__doc_skip_ws(&d);
	if (d.p < d.end && *d.p == '}')
		d.p++;
	else for (;;) {
		if ((rc = top_one(&d, &c, seen, &floor_at, &rules_at, &nitems)))
			goto out;
		tsec__doc_skip_ws(&d);
		if (d.p < d.end && *d.p == '}') {
			d.p++;
			break;
		}
		if ((rc = tsec__doc_expect(&d, ',', "expected ',' or '}' after a member")))
			goto out;
	}
	tsec__doc_skip_ws(&d);
	if (d.p != d.end) {
		rc = tsec__doc_syntax(&d, d.p, "end of file expected");
		goto out;
	}
	if (!seen[TOP_VERSION]) {
		rc = tsec__cc_fail(&c, "version", -1, "missing version");
		goto out;
	}

	/* Second pass: compile the rules where the first pass found them. */
	if ((rc = tsec__policy_new(&c.pol, len, nitems))) {
		rc = tsec__cc_oom(&c);
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
	if ((rc = tsec__terms_finish(c.pol))) {
		rc = tsec__cc_oom(&c);
		goto out;
	}
	*out = c.pol;
	c.pol = NULL;
	rc = 0;
out:
	if (nerrs && c.nerrs)
		*nerrs = c.nerrs;
	tsec__policy_free(&c.pol);
	return rc;
}
