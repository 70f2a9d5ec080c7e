/*
 * tsec-broker: cert.obtain, the on-demand TLS decision.  May this server
 * obtain a certificate for this name now?  Asked by Caddy's "ask"
 * endpoint (ask.c), the Go binding's DecisionFunc and `tsec check`, all
 * through tsec__obtain.
 *
 * The name is read as a host name (lower-cased, one trailing dot
 * dropped, LDH labels) or an IP address, and the policy is asked for
 * action cert.obtain on "names/<name>" (an IPv6 address with '-' for
 * ':', as certmagic writes it in its keys).  An allow whose rules carry
 * "when": {"rate": {"max_new": N, "window_s": W}} is then counted: at
 * most N names not allowed before, per principal and registrable suffix
 * (the public suffix list, libpsl), in any W seconds, counted on the
 * broker's storage, so every broker of a fleet counts with the others.
 * An allow with a rule that carries no rate is not counted.
 *
 * The count is one record per principal and suffix, under the store's
 * reserved folder (no caller can name it): the names allowed and when,
 * changed only by a compare-and-swap, so two brokers that count at once
 * cannot both take the last place.  A record that names another
 * principal or suffix than its place is refused as corrupt: deny.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpsl.h>
#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/obtain.h"
#include "broker/storage/store_above.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/jsonw.h"
#include "common/wire.h"

#define CAS_TRIES 16

struct tsec__obtain_limits {
	size_t n;
	uint32_t longest_s;          /* the longest window: what a record keeps */
	struct {
		char id[TSEC_ID_MAX];
		uint32_t max, window_s;
	} v[];
};

/* ---- the limits the running policy sets ---- */

struct tsec__obtain_limits *tsec__obtain_limits_of(const char *text, size_t len)
{
	json_t *root = json_loadb(text, len, 0, NULL), *rules, *r;
	struct tsec__obtain_limits *l;
	size_t i, n = 0;

	rules = json_object_get(root, "rules");
	l = calloc(1, sizeof(*l) + (json_array_size(rules) + 1) * sizeof(l->v[0]));
	if (!l) {
		json_decref(root);
		return NULL;
	}
	/* The module compiled this text: every rate here is well formed. */
	json_array_foreach(rules, i, r) {
		json_t *rate = json_object_get(json_object_get(r, "when"), "rate");
		const char *id = json_string_value(json_object_get(r, "id"));

		if (!json_is_object(rate) || !id)
			continue;
		snprintf(l->v[n].id, sizeof(l->v[n].id), "%s", id);
		l->v[n].max = (uint32_t)json_integer_value(json_object_get(rate, "max_new"));
		l->v[n].window_s = (uint32_t)json_integer_value(json_object_get(rate, "window_s"));
		if (l->v[n].window_s > l->longest_s)
			l->longest_s = l->v[n].window_s;
		n++;
	}
	l->n = n;
	json_decref(root);
	return l;
}

void tsec__obtain_limits_set(struct tsec__daemon *d, struct tsec__obtain_limits *l)
{
	struct tsec__obtain_limits *old;

	pthread_mutex_lock(&d->policy_lock);
	old = d->obtain_limits;
	d->obtain_limits = l;
	pthread_mutex_unlock(&d->policy_lock);
	free(old);
}

/* The rates of the deciding rules (n of them); 0, or 1 when one of them
 * has none (the allow is not counted). */
static int limits_for(struct tsec__daemon *d, const struct tsec_decision *dec,
		      struct tsec__obtain_limit *out, size_t *n, uint32_t *keep_s)
{
	int unbounded = 0;

	*n = 0;
	pthread_mutex_lock(&d->policy_lock);
	*keep_s = d->obtain_limits ? d->obtain_limits->longest_s : 0;
	for (unsigned i = 0; i < dec->nrules && !unbounded; i++) {
		const struct tsec__obtain_limits *l = d->obtain_limits;
		size_t j = 0;

		while (l && j < l->n && strcmp(l->v[j].id, dec->rules[i]))
			j++;
		if (!l || j == l->n) {
			unbounded = 1;
			break;
		}
		snprintf(out[*n].id, sizeof(out[*n].id), "%s", l->v[j].id);
		out[*n].max = l->v[j].max;
		out[(*n)++].window_s = l->v[j].window_s;
	}
	pthread_mutex_unlock(&d->policy_lock);
	return unbounded;
}

/* ---- names ---- */

static int label_char(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
}

/* A host name: LDH labels (and '_'), 1-63 bytes each, 253 in all. */
static const char *host_bad(const char *s, size_t n)
{
	size_t label = 0;

	if (n == 0 || n > 253)
		return "a name is 1 to 253 bytes";
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '.') {
			if (label == 0)
				return "empty label in name";
			if (s[i - 1] == '-')
				return "a label ends in '-'";
			label = 0;
			continue;
		}
		if (!label_char((unsigned char)s[i]))
			return "a name holds only letters, digits, '-', '_' and '.' (an IDN as "
			       "its xn-- form)";
		if (label == 0 && s[i] == '-')
			return "a label starts with '-'";
		if (++label > 63)
			return "a label is longer than 63 bytes";
	}
	if (label == 0)
		return "empty label in name";    /* "a.b..": one dot is dropped */
	if (s[n - 1] == '-')
		return "a label ends in '-'";
	return NULL;
}

int tsec__obtain_name(struct tsec__daemon *d, const char *in, size_t n,
		      struct tsec__obtained *o)
{
	char buf[256];
	const char *why = NULL, *reg;

	if (n >= 2 && in[0] == '[' && in[n - 1] == ']') {
		in++;
		n -= 2;
	}
	if (n == 0 || n >= sizeof(buf) || memchr(in, '\0', n)) {
		why = "a name is 1 to 253 bytes";
		goto bad;
	}
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)tolower((unsigned char)in[i]);
	buf[n] = '\0';
	if (memchr(buf, ':', n)) {
		struct in6_addr a6;

		if (inet_pton(AF_INET6, buf, &a6) != 1 ||
		    !inet_ntop(AF_INET6, &a6, o->name, sizeof(o->name))) {
			why = "not an IPv6 address";
			goto bad;
		}
		snprintf(o->suffix, sizeof(o->suffix), "%s", o->name);
		snprintf(o->resource, sizeof(o->resource), "names/%s", o->name);
		for (char *p = o->resource; *p; p++)
			if (*p == ':')
				*p = '-';
		return 0;
	}
	if (n > 1 && buf[n - 1] == '.')
		buf[--n] = '\0';
	{
		struct in_addr a4;

		if (inet_pton(AF_INET, buf, &a4) == 1) {
			snprintf(o->name, sizeof(o->name), "%s", buf);
			snprintf(o->suffix, sizeof(o->suffix), "%s", buf);
			snprintf(o->resource, sizeof(o->resource), "names/%s", buf);
			return 0;
		}
	}
	if ((why = host_bad(buf, n)))
		goto bad;
	snprintf(o->name, sizeof(o->name), "%s", buf);
	snprintf(o->resource, sizeof(o->resource), "names/%s", buf);
	/* The registrable domain; a public suffix or a lone label is its own. */
	if (d->psl) {
		reg = psl_registrable_domain(d->psl, o->name);
	} else {
		/* No list (said at start): the last two labels. */
		reg = strrchr(o->name, '.');
		while (reg && reg > o->name && reg[-1] != '.')
			reg--;
		if (reg && reg == strrchr(o->name, '.'))
			reg = NULL;
	}
	snprintf(o->suffix, sizeof(o->suffix), "%s", reg ? reg : o->name);
	return 0;
bad:
	snprintf(o->reason, sizeof(o->reason), "name: %s", why);
	return TSEC_EINVAL;
}

/* ---- the count ---- */

/* The record's name: one segment, from the principal and the suffix. */
static void record_name(const char *principal, const char *suffix, char out[48])
{
	uint8_t h[16];
	crypto_generichash_state st;

	crypto_generichash_init(&st, (const uint8_t *)"tsec-obtain", 11, sizeof(h));
	crypto_generichash_update(&st, (const uint8_t *)principal, strlen(principal) + 1);
	crypto_generichash_update(&st, (const uint8_t *)suffix, strlen(suffix));
	crypto_generichash_final(&st, h, sizeof(h));
	memcpy(out, "obtain-", 7);
	sodium_bin2hex(out + 7, 33, h, sizeof(h));
}

static bool str_is(json_t *v, const char *s)
{
	return json_is_string(v) && !strcmp(json_string_value(v), s);
}

json_t *tsec__obtain_record_read(const char *text, size_t len, const char *principal,
				 const char *suffix, int64_t now, uint32_t keep_s, const char **why)
{
	json_t *root, *names, *e, *kept;
	size_t i;

	if (!text)
		return json_array();
	root = json_loadb(text, len, 0, NULL);
	names = json_object_get(root, "names");
	if (json_integer_value(json_object_get(root, "tsec_obtain")) != 1 ||
	    !json_is_array(names) || !str_is(json_object_get(root, "principal"), principal) ||
	    !str_is(json_object_get(root, "suffix"), suffix)) {
		*why = "the count's record is not this principal's and suffix's";
		json_decref(root);
		return NULL;
	}
	kept = json_array();
	json_array_foreach(names, i, e) {
		json_int_t t = json_integer_value(json_array_get(e, 1));

		if (json_is_string(json_array_get(e, 0)) && t > now - (json_int_t)keep_s &&
		    json_array_size(kept) < TSEC_RATE_MAX_NEW)
			json_array_append(kept, e);
	}
	json_decref(root);
	return kept;
}

/* Names of the list allowed within window_s of now. */
static uint32_t used_in(json_t *names, int64_t now, uint32_t window_s)
{
	uint32_t used = 0;
	size_t i;
	json_t *e;

	json_array_foreach(names, i, e)
		if (json_integer_value(json_array_get(e, 1)) > now - (json_int_t)window_s)
			used++;
	return used;
}

static int listed(json_t *names, const char *name)
{
	size_t i;
	json_t *e;

	json_array_foreach(names, i, e)
		if (str_is(json_array_get(e, 0), name))
			return 1;
	return 0;
}

/*
 * One look at the count (and, unless dry, one compare-and-swap): *room 1
 * with the limit that lets the name in, 0 with the fullest; TSEC_EBUSY
 * when another writer came first.
 */
static int count_once(struct tsec__daemon *d, const char *principal, struct tsec__obtained *o,
		      const struct tsec__obtain_limit *lim, size_t nlim, uint32_t keep_s,
		      int64_t now, bool dry, int *room, struct tsec_error *err)
{
	char rec[48], *old = NULL, *text = NULL;
	size_t oldlen = 0, best = 0;
	const char *why = NULL;
	json_t *names;
	int rc;

	record_name(principal, o->suffix, rec);
	rc = tsec__store_record_get(d->store, rec, &old, &oldlen, err);
	if (rc && rc != TSEC_ENOENT)
		return rc;
	names = tsec__obtain_record_read(rc ? NULL : old, oldlen, principal, o->suffix, now,
					 keep_s, &why);
	if (!names) {
		free(old);
		return tsec__seterr(err, TSEC_ECORRUPT, rec, "%s", why);
	}
	*room = 0;
	o->fresh = !listed(names, o->name);
	for (size_t i = 0; i < nlim; i++) {
		uint32_t used = used_in(names, now, lim[i].window_s);

		if (!o->fresh || used < lim[i].max) {
			*room = 1;
			best = i;
			o->used = used;
			break;
		}
		if (i == 0 || used - lim[i].max < o->used - lim[best].max) {
			best = i;
			o->used = used;
		}
	}
	o->max = lim[best].max;
	o->window_s = lim[best].window_s;
	snprintf(o->limit_rule, sizeof(o->limit_rule), "%s", lim[best].id);
	if (*room && o->fresh && !dry) {
		json_t *doc;

		json_array_append_new(names, json_pack("[sI]", o->name, (json_int_t)now));
		doc = json_pack("{s:i,s:s,s:s,s:O}", "tsec_obtain", 1, "principal", principal,
				"suffix", o->suffix, "names", names);
		text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
		json_decref(doc);
		rc = text ? tsec__store_record_cas(d->store, rec, rc ? NULL : old, oldlen, text,
						   strlen(text), err)
			  : tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		if (!rc)
			o->used++;
	} else {
		rc = 0;
	}
	free(text);
	free(old);
	json_decref(names);
	return rc;
}

static int count(struct tsec__daemon *d, const char *principal, struct tsec__obtained *o,
		 const struct tsec__obtain_limit *lim, size_t nlim, uint32_t keep_s, int64_t now,
		 bool dry, int *room, struct tsec_error *err)
{
	int rc = TSEC_EBUSY;

	/* EBUSY: the record changed since it was read (records.c). */
	for (int t = 0; t < CAS_TRIES && (rc == TSEC_EBUSY || rc == TSEC_ECHANGED); t++)
		rc = count_once(d, principal, o, lim, nlim, keep_s, now, dry, room, err);
	return rc;
}

/* ---- the decision ---- */

/* A counted allow turned into a deny: the rules that bound it, and why. */
static void rate_deny(struct tsec__obtained *o, struct tsec__why_not *why)
{
	o->dec.allow = 0;
	o->dec.status = TSEC_STATUS_DENIED;
	o->dec.nrules = 1;
	o->dec.flags = 0;
	snprintf(o->dec.rules[0], sizeof(o->dec.rules[0]), "%s", o->limit_rule);
	snprintf(o->reason, sizeof(o->reason),
		 "rate: %u of %u new names under %.80s in %u s already allowed", o->used, o->max,
		 o->suffix, o->window_s);
	snprintf(o->dec.detail, sizeof(o->dec.detail), "%s", o->reason);
	why->n = 1;
	snprintf(why->v[0].rule, sizeof(why->v[0].rule), "%s", o->limit_rule);
	snprintf(why->v[0].why, sizeof(why->v[0].why), "%s", o->reason);
	why->v[0].dest = 0;
}

int tsec__obtain(struct tsec__daemon *d, struct tsec__call *c, const char *name, size_t n,
		 bool dry, int64_t now_s, struct tsec__obtained *o, struct tsec_error *err)
{
	struct tsec__obtain_limit lim[TSEC_DECISION_RULES];
	struct tsec__why_not why = { .n = 0 };
	struct tsec_request r;
	size_t nlim = 0;
	uint32_t keep_s;
	int64_t t0 = (int64_t)tsec__mono_ns();
	int rc = 0, room = 0;

	memset(o, 0, sizeof(*o));
	memset(&r, 0, sizeof(r));
	r.principal = c->p.id;
	r.roles = c->p.roles;
	r.nroles = c->p.nroles;
	r.action = tsec_str_c("cert.obtain");
	if (tsec__obtain_name(d, name, n, o)) {
		o->dec.status = TSEC_STATUS_INVALID;
		snprintf(o->dec.field, sizeof(o->dec.field), "name");
		snprintf(o->dec.detail, sizeof(o->dec.detail), "%s", o->reason);
		/* What was asked, escaped by the log like any caller's field. */
		r.resource.ptr = name;
		r.resource.len = n;
		goto log;
	}
	r.resource = tsec_str_c(o->resource);
	if (now_s) {
		r.ctx.has = TSEC_CTX_NOW;
		r.ctx.now = now_s;
	} else {
		now_s = tsec__wall_ms() / 1000;
	}
	if ((rc = tsec_bus_check(d->bus, "policy", &r, 1, &o->dec, err)))
		goto log;
	if (!o->dec.allow) {
		tsec__why_not_of(d, &r, &o->dec, &why);
		snprintf(o->reason, sizeof(o->reason), "%s", why.n ? why.v[0].why
			 : tsec_status_reason(o->dec.status));
		goto log;
	}
	if (limits_for(d, &o->dec, lim, &nlim, &keep_s) || nlim == 0) {
		snprintf(o->reason, sizeof(o->reason), "allowed by rule, not counted");
		goto log;
	}
	o->rated = 1;
	if ((rc = count(d, c->who->principal, o, lim, nlim, keep_s, now_s, dry, &room, err)))
		goto log;
	if (!room)
		rate_deny(o, &why);
	else
		snprintf(o->reason, sizeof(o->reason), o->fresh ? "%u of %u new names under %s "
			 "in %u s" : "allowed before: not new (%u of %u under %s in %u s)",
			 o->used, o->max, o->suffix, o->window_s);
log:
	if (rc) {
		/* Not decided: deny, and say why. */
		memset(&o->dec, 0, sizeof(o->dec));
		snprintf(o->dec.detail, sizeof(o->dec.detail), "%.150s", err->msg);
		snprintf(o->reason, sizeof(o->reason), "not decided: %.140s", err->msg);
	}
	if (!o->dec.allow)
		atomic_fetch_add(&d->st.denied, 1);
	tsec__log_decision(d, c, &r.action, &r.resource, &r.ctx, &o->dec, &why,
			   (int64_t)tsec__mono_ns() - t0);
	return rc;
}

/* ---- the method ---- */

json_t *tsec__obtained_json(const struct tsec__obtained *o)
{
	json_t *j = json_pack("{s:b,s:s,s:s,s:s}", "allow", o->dec.allow, "status",
			      tsec__status_name(o->dec.status), "reason", o->reason, "name",
			      o->name);
	json_t *rules = json_array();

	for (unsigned i = 0; i < o->dec.nrules && i < TSEC_DECISION_RULES; i++)
		json_array_append_new(rules, json_string(o->dec.rules[i]));
	json_object_set_new(j, "rules", rules);
	if (o->resource[0]) {
		json_object_set_new(j, "resource", json_string(o->resource));
		json_object_set_new(j, "suffix", json_string(o->suffix));
	}
	if (o->rated) {
		json_object_set_new(j, "new", json_boolean(o->fresh));
		json_object_set_new(j, "used", json_integer(o->used));
		json_object_set_new(j, "max_new", json_integer(o->max));
		json_object_set_new(j, "window_s", json_integer(o->window_s));
		json_object_set_new(j, "rate_rule", json_string(o->limit_rule));
	}
	return j;
}

/* {"name": N, "dry": bool}: the decision, counted unless dry. */
json_t *tsec__m_cert_obtain(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	json_t *name = json_object_get(c->params, "name"), *dry = json_object_get(c->params, "dry");
	json_t *now = json_object_get(c->params, "now");
	struct tsec__obtained o;
	struct tsec_error err;
	int64_t now_s = 0;

	if (!json_is_string(name))
		return tsec__fail(TSEC_EPROTO, "params.name", "need the name asked for, a string");
	if (dry && !json_is_boolean(dry))
		return tsec__fail(TSEC_EPROTO, "params.dry", "must be true or false");
	if (now) {
		if (!(d->cfg.allow_caller_clock && c->who->admin) || !json_is_integer(now) ||
		    json_integer_value(now) <= 0)
			return tsec__fail(TSEC_EPROTO, "params.now", "only an admin caller may set "
					  "the clock, and only with allow_caller_clock");
		now_s = (int64_t)json_integer_value(now);
	}
	if (tsec__obtain(d, c, json_string_value(name), json_string_length(name),
			 json_is_true(dry), now_s, &o, &err))
		return tsec__err_json(&err);
	*result = tsec__obtained_json(&o);
	return NULL;
}
