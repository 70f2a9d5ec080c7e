/*
 * Evaluate's report and why-not: the rules that matched, the errors met,
 * the rules that matched the request but did not apply and the
 * condition that failed, and the request's certificate as the policy saw
 * it.  Check never comes here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "module/walk.h"

void tsec__report_error(struct tsec_report *rep, const struct tsec__rule *r,
			 const char *why)
{
	for (uint32_t i = 0; i < rep->nerrors; i++)
		if (strcmp(rep->errors[i].rule, r->id) == 0)
			return;
	if (rep->nerrors == TSEC_REPORT_ERRORS)
		return;
	memcpy(rep->errors[rep->nerrors].rule, r->id, TSEC_ID_MAX);
	rep->errors[rep->nerrors].code = TSEC_ECERT;
	snprintf(rep->errors[rep->nerrors].msg, sizeof(rep->errors[0].msg), "%s", why);
	rep->nerrors++;
}


static const char *const key_type_name[TSEC__KEYTYPE__COUNT] = {
	"other", "rsa", "ec-p256", "ec-p384", "ed25519",
};

/* Why r's domains do not hold (said into out): true, or false when they
 * hold or r names none. */
static bool why_not_domain(struct walk *w, const struct tsec__rule *r, char *out, size_t cap)
{
	bool any = false;
	size_t o;

	domain(w);
	if (!r->dom_count)
		return false;
	for (uint32_t i = 0; i < r->dom_count && w->domain_len && !any; i++) {
		const struct tsec__dom *d = &w->pol->doms[r->dom_first + i];
		any = tsec__domain_match(w->pol->arena + d->off, d->len, w->domain,
					 w->domain_len);
	}
	if (any)
		return false;
	o = (size_t)snprintf(out, cap, w->domain_len ? "domain %.*s not in [" :
			     "domain: the key names none; the rule wants [",
			     (int)w->domain_len, w->domain);
	for (uint32_t i = 0; i < r->dom_count && o < cap; i++) {
		const struct tsec__dom *d = &w->pol->doms[r->dom_first + i];
		o += (size_t)snprintf(out + o, cap - o, "%s%.*s", i ? ", " : "",
				      (int)d->len, w->pol->arena + d->off);
	}
	if (o < cap)
		snprintf(out + o, cap - o, "]");
	return true;
}

/* Why r's certificate conditions do not hold (said into out): true, or
 * false when they hold. */
static bool why_not_cert(struct walk *w, const struct tsec__rule *r, char *out, size_t cap)
{
	const struct tsec_context *ctx = &w->req->ctx;
	const struct tsec__cert_facts *f;

	f = facts(w);
	if (!f->ok) {
		snprintf(out, cap, "cert: %s", f->error);
		return true;
	}
	if (r->cert & TSEC__CERT_SAN) {
		snprintf(out, cap, "cert san_covers_domain: no DNS name of the certificate covers %.*s",
			 (int)w->domain_len, w->domain);
		for (uint32_t i = 0; i < f->nsans; i++)
			if (w->domain_len && tsec__domain_match(f->names + f->san_off[i], f->san_len[i],
								w->domain, w->domain_len))
				out[0] = '\0';
		if (out[0])
			return true;
	}
	if (r->cert & TSEC__CERT_REMAINING) {
		int64_t now = (ctx->has & TSEC_CTX_NOW) ? ctx->now : (int64_t)time(NULL), left;

		if (__builtin_sub_overflow(f->not_after, now, &left))
			left = now > 0 ? INT64_MIN : INT64_MAX;
		if (left < 0 || (uint64_t)left < r->min_remaining_s) {
			snprintf(out, cap, "cert min_remaining_s: %lld s left < %llu", (long long)left,
				 (unsigned long long)r->min_remaining_s);
			return true;
		}
	}
	if ((r->cert & TSEC__CERT_RSA_BITS) && f->key_type == TSEC__KEYTYPE_RSA &&
	    f->rsa_bits < r->min_rsa_bits) {
		snprintf(out, cap, "cert min_rsa_bits: rsa %u < %u", f->rsa_bits, r->min_rsa_bits);
		return true;
	}
	if ((r->cert & TSEC__CERT_KEY_TYPES) && !(r->key_types & (1u << f->key_type))) {
		size_t o = (size_t)snprintf(out, cap, "cert key_types: %s not in [",
					    key_type_name[f->key_type % TSEC__KEYTYPE__COUNT]);
		for (unsigned t = 0, n = 0; t < TSEC__KEYTYPE__COUNT && o < cap; t++)
			if (r->key_types & (1u << t))
				o += (size_t)snprintf(out + o, cap - o, "%s%s", n++ ? ", " : "",
						      key_type_name[t]);
		if (o < cap)
			snprintf(out + o, cap - o, "]");
		return true;
	}
	return false;
}

/* The first of r's conditions that does not hold, with the values (why-not). */
void tsec__why_not(struct walk *w, const struct tsec__rule *r, char *out, size_t cap)
{
	const struct tsec_context *ctx = &w->req->ctx;

	if (r->exc_count && tsec__excepted(w->pol, r, w->req)) {
		snprintf(out, cap, "except: %.*s is excepted", (int)w->req->principal.len,
			 w->req->principal.ptr);
		return;
	}
	if (why_not_domain(w, r, out, cap))
		return;
	switch (tsec__when_fails(ctx, r)) {
	case TSEC__WHEN_TTL_MAX:
		snprintf(out, cap, "ttl_ms %llu > ttl_ms_max %llu", (unsigned long long)ctx->ttl_ms,
			 (unsigned long long)r->ttl_ms_max);
		return;
	case TSEC__WHEN_SIZE_MAX:
		snprintf(out, cap, "size %llu > size_max %llu", (unsigned long long)ctx->size,
			 (unsigned long long)r->size_max);
		return;
	case TSEC__WHEN_RECURSIVE:
		snprintf(out, cap, "recursive: the rule wants %s, the request is %s",
			 r->recursive ? "true" : "false",
			 (ctx->has & TSEC_CTX_RECURSIVE) && ctx->recursive ? "recursive" : "not");
		return;
	}
	if (!why_not_cert(w, r, out, cap))
		snprintf(out, cap, "a condition does not hold");
}

/* Notes a rule that matched principal, action and resource but not its
 * conditions (Evaluate with explain only).  Kept out of line and cold so
 * that Check's hit() stays as small as it was. */
__attribute__((noinline, cold))
void tsec__explain_miss(struct walk *w, const struct tsec__rule *r)
{
	struct tsec_explain *ex = w->ex;

	if (!(r->actions & (1u << w->action)))
		return;                  /* not this action: it did not match */
	for (uint32_t i = 0; i < ex->nnot_applied; i++)
		if (ex->not_applied[i].dest == w->end && !strcmp(ex->not_applied[i].rule, r->id))
			return;
	ex->nnot_applied_total++;
	if (ex->nnot_applied == TSEC_EXPLAIN_MAX)
		return;
	memcpy(ex->not_applied[ex->nnot_applied].rule, r->id, TSEC_ID_MAX);
	ex->not_applied[ex->nnot_applied].effect = r->effect;
	ex->not_applied[ex->nnot_applied].dest = w->end;
	tsec__why_not(w, r, ex->not_applied[ex->nnot_applied].why, sizeof(ex->not_applied[0].why));
	ex->nnot_applied++;
}

/* What the request's certificate says, as the policy sees it. */
__attribute__((noinline, cold))
void tsec__explain_cert(struct walk *w)
{
	const struct tsec__cert_facts *f;
	struct tsec_explain *ex = w->ex;
	size_t o, cap = sizeof(ex->cert);

	if (!(w->req->ctx.has & TSEC_CTX_CERT_PEM))
		return;
	ex->has_cert = 1;
	f = facts(w);
	if (!f->ok) {
		snprintf(ex->cert, cap, "does not parse: %s", f->error);
		return;
	}
	o = (size_t)snprintf(ex->cert, cap, "dns:");
	for (uint32_t i = 0; i < f->nsans && o < cap; i++)
		o += (size_t)snprintf(ex->cert + o, cap - o, "%s%.*s", i ? ", " : " ",
				      (int)f->san_len[i], f->names + f->san_off[i]);
	if (o < cap)
		o += (size_t)snprintf(ex->cert + o, cap - o, "; not_after: %lld; key: %s",
				      (long long)f->not_after,
				      key_type_name[f->key_type % TSEC__KEYTYPE__COUNT]);
	if (o < cap && f->key_type == TSEC__KEYTYPE_RSA)
		snprintf(ex->cert + o, cap - o, " %u", f->rsa_bits);
}



