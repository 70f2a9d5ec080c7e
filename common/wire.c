/* The JSON of the wire (see wire.h). */
#include <limits.h>
#include <string.h>

#include "common/wire.h"
#include "common/jsonw.h"
#include "common/error.h"

static int bad(struct tsec_error *err, const char *where, const char *msg)
{
	return tsec__seterr(err, TSEC_EPROTO, where, "%s", msg);
}

static int str_field(json_t *o, const char *name, struct tsec_str *out,
		     struct tsec_error *err, const char *where)
{
	json_t *v = json_object_get(o, name);

	if (!json_is_string(v))
		return bad(err, where, "must be a string");
	out->ptr = json_string_value(v);
	out->len = json_string_length(v);
	return 0;
}

static int uint_field(json_t *v, uint64_t *out, struct tsec_error *err,
		      const char *where)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return bad(err, where, "must be a non-negative integer");
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int tsec__request_from_json(json_t *o, struct tsec_request *r, bool allow_now,
			    struct tsec_error *err)
{
	json_t *ctx, *v;
	const char *k;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!json_is_object(o))
		return bad(err, "request", "must be an object");
	json_object_foreach(o, k, v) {
		if (strcmp(k, "action") && strcmp(k, "resource") && strcmp(k, "context"))
			return bad(err, k, strcmp(k, "principal") && strcmp(k, "roles")
				   ? "unknown field"
				   : "the principal comes from authentication, not the payload");
	}
	if ((rc = str_field(o, "action", &r->action, err, "action")) ||
	    (rc = str_field(o, "resource", &r->resource, err, "resource")))
		return rc;
	ctx = json_object_get(o, "context");
	if (!ctx)
		return 0;
	if (!json_is_object(ctx))
		return bad(err, "context", "must be an object");
	json_object_foreach(ctx, k, v) {
		if (!strcmp(k, "ttl_ms")) {
			if ((rc = uint_field(v, &r->ctx.ttl_ms, err, "context.ttl_ms")))
				return rc;
			r->ctx.has |= TSEC_CTX_TTL_MS;
		} else if (!strcmp(k, "size")) {
			if ((rc = uint_field(v, &r->ctx.size, err, "context.size")))
				return rc;
			r->ctx.has |= TSEC_CTX_SIZE;
		} else if (!strcmp(k, "recursive")) {
			if (!json_is_boolean(v))
				return bad(err, "context.recursive", "must be true or false");
			r->ctx.recursive = json_is_true(v);
			r->ctx.has |= TSEC_CTX_RECURSIVE;
		} else if (!strcmp(k, "dest")) {
			if ((rc = str_field(ctx, k, &r->ctx.dest, err, "context.dest")))
				return rc;
			r->ctx.has |= TSEC_CTX_DEST;
		} else if (!strcmp(k, "cert_pem")) {
			if ((rc = str_field(ctx, k, &r->ctx.cert_pem, err, "context.cert_pem")))
				return rc;
			r->ctx.has |= TSEC_CTX_CERT_PEM;
		} else if (!strcmp(k, "now")) {
			/* The clock belongs to the server (conditions such as
			 * min_remaining_s are measured against it). */
			if (!allow_now)
				return tsec__seterr(err, TSEC_EDENIED, "context.now",
						    "the clock is the server's: a caller may not set "
						    "\"now\" (see \"allow_caller_clock\")");
			if (!json_is_integer(v))
				return bad(err, "context.now", "must be an integer");
			r->ctx.now = json_integer_value(v);
			r->ctx.has |= TSEC_CTX_NOW;
		} else {
			return bad(err, k, "unknown context field");
		}
	}
	return 0;
}

json_t *tsec__request_to_json(const struct tsec_request *r)
{
	json_t *o = json_object(), *c = json_object();

	json_object_set_new(o, "action", json_stringn(r->action.ptr ? r->action.ptr : "", r->action.len));
	json_object_set_new(o, "resource", json_stringn(r->resource.ptr ? r->resource.ptr : "", r->resource.len));
	if (r->ctx.has & TSEC_CTX_TTL_MS)
		json_object_set_new(c, "ttl_ms", json_integer((json_int_t)r->ctx.ttl_ms));
	if (r->ctx.has & TSEC_CTX_SIZE)
		json_object_set_new(c, "size", json_integer((json_int_t)r->ctx.size));
	if (r->ctx.has & TSEC_CTX_RECURSIVE)
		json_object_set_new(c, "recursive", json_boolean(r->ctx.recursive));
	if (r->ctx.has & TSEC_CTX_DEST)
		json_object_set_new(c, "dest", json_stringn(r->ctx.dest.ptr, r->ctx.dest.len));
	if (r->ctx.has & TSEC_CTX_CERT_PEM)
		json_object_set_new(c, "cert_pem", json_stringn(r->ctx.cert_pem.ptr, r->ctx.cert_pem.len));
	if (r->ctx.has & TSEC_CTX_NOW)
		json_object_set_new(c, "now", json_integer(r->ctx.now));
	if (json_object_size(c))
		json_object_set_new(o, "context", c);
	else
		json_decref(c);
	return o;
}

static const char *const status_names[] = {
	"none", "invalid", "floor", "denied", "allowed", "default",
};

const char *tsec__status_name(unsigned status)
{
	return status <= TSEC_STATUS_DEFAULT ? status_names[status] : "none";
}

/* A string a module wrote into an array, read no further than the array
 * (its NUL is the module's promise, not something to rely on). */
#define ARRAY_STR(a) json_stringn((a), strnlen((a), sizeof(a)))

#define SEAL(a) ((a)[sizeof(a) - 1] = '\0')

void tsec__decision_seal(struct tsec_decision *d)
{
	if (d->nrules > TSEC_DECISION_RULES)
		d->nrules = TSEC_DECISION_RULES;
	for (unsigned j = 0; j < TSEC_DECISION_RULES; j++)
		SEAL(d->rules[j]);
	SEAL(d->field);
	SEAL(d->detail);
}

void tsec__explain_seal(struct tsec_explain *ex)
{
	if (ex->nnot_applied > TSEC_EXPLAIN_MAX)
		ex->nnot_applied = TSEC_EXPLAIN_MAX;
	for (uint32_t i = 0; i < TSEC_EXPLAIN_MAX; i++) {
		SEAL(ex->not_applied[i].rule);
		SEAL(ex->not_applied[i].why);
	}
	SEAL(ex->cert);
}

json_t *tsec__decision_to_json(const struct tsec_decision *d)
{
	json_t *o = json_object(), *rules = json_array();

	for (unsigned i = 0; i < d->nrules && i < TSEC_DECISION_RULES; i++)
		json_array_append_new(rules, ARRAY_STR(d->rules[i]));
	json_object_set_new(o, "allow", json_boolean(d->allow));
	json_object_set_new(o, "status", json_string(tsec__status_name(d->status)));
	json_object_set_new(o, "reason", json_string(tsec_status_reason(d->status)));
	json_object_set_new(o, "rules", rules);
	if (d->flags & TSEC_DECISION_MORE_RULES)
		json_object_set_new(o, "more_rules", json_true());
	if (d->flags & TSEC_DECISION_COND_ERROR)
		json_object_set_new(o, "condition_error", json_true());
	if (d->field[0])
		json_object_set_new(o, "field", ARRAY_STR(d->field));
	if (d->detail[0])
		json_object_set_new(o, "detail", ARRAY_STR(d->detail));
	return o;
}

void tsec__decision_rules_write(struct tsec__jw *w, const struct tsec_decision *d)
{
	TSEC__JW_LIT(w, "[");
	for (unsigned i = 0; i < d->nrules && i < TSEC_DECISION_RULES; i++) {
		if (i)
			TSEC__JW_LIT(w, ",");
		tsec__jw_str(w, d->rules[i], strnlen(d->rules[i], TSEC_ID_MAX));
	}
	TSEC__JW_LIT(w, "]");
}

void tsec__decision_write(struct tsec__jw *w, const struct tsec_decision *d)
{
	tsec__decision_write_open(w, d);
	TSEC__JW_LIT(w, "}");
}

void tsec__decision_write_open(struct tsec__jw *w, const struct tsec_decision *d)
{
	/* The members and order of tsec__decision_to_json. */
	TSEC__JW_LIT(w, "{\"allow\":");
	tsec__jw_bool(w, d->allow);
	/* Our own words (tsec__status_name, tsec_status_reason), written as
	 * the JSON text they are; test_wire holds each to jansson's. */
	switch (d->status) {
	case TSEC_STATUS_INVALID:
		TSEC__JW_LIT(w, ",\"status\":\"invalid\",\"reason\":\"invalid request\"");
		break;
	case TSEC_STATUS_FLOOR:
		TSEC__JW_LIT(w, ",\"status\":\"floor\",\"reason\":\"forbidden by floor\"");
		break;
	case TSEC_STATUS_DENIED:
		TSEC__JW_LIT(w, ",\"status\":\"denied\",\"reason\":\"forbidden by rule\"");
		break;
	case TSEC_STATUS_ALLOWED:
		TSEC__JW_LIT(w, ",\"status\":\"allowed\",\"reason\":\"allowed by rule\"");
		break;
	case TSEC_STATUS_DEFAULT:
		TSEC__JW_LIT(w, ",\"status\":\"default\",\"reason\":\"nothing allowed it\"");
		break;
	default:
		TSEC__JW_LIT(w, ",\"status\":");
		tsec__jw_cstr(w, tsec__status_name(d->status));
		TSEC__JW_LIT(w, ",\"reason\":");
		tsec__jw_cstr(w, tsec_status_reason(d->status));
	}
	TSEC__JW_LIT(w, ",\"rules\":");
	tsec__decision_rules_write(w, d);
	if (d->flags & TSEC_DECISION_MORE_RULES)
		TSEC__JW_LIT(w, ",\"more_rules\":true");
	if (d->flags & TSEC_DECISION_COND_ERROR)
		TSEC__JW_LIT(w, ",\"condition_error\":true");
	if (d->field[0]) {
		TSEC__JW_LIT(w, ",\"field\":");
		tsec__jw_str(w, d->field, strnlen(d->field, sizeof(d->field)));
	}
	if (d->detail[0]) {
		TSEC__JW_LIT(w, ",\"detail\":");
		tsec__jw_str(w, d->detail, strnlen(d->detail, sizeof(d->detail)));
	}
}

int tsec__decision_from_json(json_t *o, struct tsec_decision *d)
{
	json_t *rules, *v;
	const char *st;
	size_t i;

	memset(d, 0, sizeof(*d));
	if (!json_is_object(o) || !(st = json_string_value(json_object_get(o, "status"))))
		return TSEC_EPROTO;
	for (unsigned s = 0; s <= TSEC_STATUS_DEFAULT; s++)
		if (!strcmp(st, status_names[s]))
			d->status = (uint8_t)s;
	/* Allowed only if both say so. */
	d->allow = d->status == TSEC_STATUS_ALLOWED && json_is_true(json_object_get(o, "allow"));
	if (d->status == TSEC_STATUS_ALLOWED && !d->allow)
		d->status = TSEC_STATUS_NONE;
	rules = json_object_get(o, "rules");
	json_array_foreach(rules, i, v) {
		if (i >= TSEC_DECISION_RULES || !json_is_string(v))
			break;
		tsec__strlcpy(d->rules[i], json_string_value(v), json_string_length(v), TSEC_ID_MAX);
		d->nrules++;
	}
	if ((v = json_object_get(o, "field")) && json_is_string(v))
		tsec__strlcpy(d->field, json_string_value(v), json_string_length(v), sizeof(d->field));
	if ((v = json_object_get(o, "detail")) && json_is_string(v))
		tsec__strlcpy(d->detail, json_string_value(v), json_string_length(v), sizeof(d->detail));
	if (json_is_true(json_object_get(o, "more_rules")))
		d->flags |= TSEC_DECISION_MORE_RULES;
	if (json_is_true(json_object_get(o, "condition_error")))
		d->flags |= TSEC_DECISION_COND_ERROR;
	return 0;
}

static const char *const effect_names[] = { "", "floor", "deny", "allow" };

json_t *tsec__report_to_json(const struct tsec_report *r)
{
	json_t *o = json_object(), *m = json_array(), *e = json_array(), *attrs = json_object();

	json_object_set_new(o, "decision", tsec__decision_to_json(&r->decision));
	if (r->action >= 0)
		json_object_set_new(attrs, "action", json_string(tsec_action_name((unsigned)r->action)));
	json_object_set_new(attrs, "kind", json_string(tsec_kind_name(r->kind)));
	json_object_set_new(attrs, "key", ARRAY_STR(r->key));
	if (r->issuer[0])
		json_object_set_new(attrs, "issuer", ARRAY_STR(r->issuer));
	if (r->domain[0])
		json_object_set_new(attrs, "domain", ARRAY_STR(r->domain));
	json_object_set_new(o, "attributes", attrs);
	for (uint32_t i = 0; i < r->nmatched && i < TSEC_REPORT_MATCHES; i++) {
		json_t *x = json_object();
		json_object_set_new(x, "id", ARRAY_STR(r->matched[i].id));
		json_object_set_new(x, "effect", json_string(r->matched[i].effect <= 3
			? effect_names[r->matched[i].effect] : ""));
		json_array_append_new(m, x);
	}
	json_object_set_new(o, "matched", m);
	json_object_set_new(o, "matched_total", json_integer(r->nmatched_total));
	for (uint32_t i = 0; i < r->nerrors && i < TSEC_REPORT_ERRORS; i++) {
		json_t *x = json_object();
		json_object_set_new(x, "rule", ARRAY_STR(r->errors[i].rule));
		json_object_set_new(x, "message", ARRAY_STR(r->errors[i].msg));
		json_array_append_new(e, x);
	}
	json_object_set_new(o, "errors", e);
	return o;
}

void tsec__explain_to_json(json_t *report, const struct tsec_explain *ex,
			   const struct tsec_request *req)
{
	json_t *who = json_object(), *roles = json_array(), *na = json_array();
	json_t *attrs = json_object_get(report, "attributes");

	json_object_set_new(who, "principal", json_stringn(req->principal.ptr, req->principal.len));
	for (uint32_t i = 0; i < req->nroles; i++)
		json_array_append_new(roles, json_stringn(req->roles[i].ptr, req->roles[i].len));
	json_object_set_new(who, "roles", roles);
	json_object_set_new(report, "caller", who);
	if ((req->ctx.has & TSEC_CTX_DEST) && attrs)
		json_object_set_new(attrs, "dest", json_stringn(req->ctx.dest.ptr, req->ctx.dest.len));
	if (ex && !ex->explained)
		ex = NULL;               /* a module without explain: the caller only */
	for (uint32_t i = 0; ex && i < ex->nnot_applied && i < TSEC_EXPLAIN_MAX; i++) {
		json_t *x = json_object();

		json_object_set_new(x, "id", ARRAY_STR(ex->not_applied[i].rule));
		json_object_set_new(x, "effect", json_string(ex->not_applied[i].effect <= 3
			? effect_names[ex->not_applied[i].effect] : ""));
		if (ex->not_applied[i].dest)
			json_object_set_new(x, "at", json_string("dest"));
		json_object_set_new(x, "why", ARRAY_STR(ex->not_applied[i].why));
		json_array_append_new(na, x);
	}
	if (ex)
		json_object_set_new(report, "not_applied", na);
	else
		json_decref(na);
	if (ex)
		json_object_set_new(report, "not_applied_total", json_integer(ex->nnot_applied_total));
	if (ex && ex->has_cert)
		json_object_set_new(report, "certificate", ARRAY_STR(ex->cert));
}

json_t *tsec__error_json(int code, const char *where, const char *message)
{
	json_t *o = json_object();

	json_object_set_new(o, "code", json_string(tsec_errname(code)));
	json_object_set_new(o, "errno", json_integer(code));
	json_object_set_new(o, "message", json_string(message ? message : tsec_strerror(code)));
	if (where && *where)
		json_object_set_new(o, "where", json_string(where));
	return o;
}

int tsec__error_from_json(json_t *e, struct tsec_error *err)
{
	const char *name = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	json_t *num = json_object_get(e, "errno");
	int code = TSEC_EPROTO;

	/* The name is the contract; a peer that sends only a number is heard. */
	if (name && strcmp(tsec_errname(tsec_errcode(name)), name) == 0)
		code = tsec_errcode(name);
	else if (!name && json_is_integer(num) && json_integer_value(num) < 0 &&
		 json_integer_value(num) > INT_MIN &&
		 strcmp(tsec_errname((int)json_integer_value(num)), "unknown"))
		code = (int)json_integer_value(num);
	if (code == TSEC_OK)
		code = TSEC_EPROTO; /* an error reply is never a success */
	return tsec__seterr(err, code, json_string_value(json_object_get(e, "where")),
			    "%s", msg ? msg : tsec_strerror(code));
}
