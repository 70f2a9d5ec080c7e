/*
 * tsec-broker: the method table, and the policy, health, stats and reload
 * calls.  The table is the one place a method is named: dispatch looks
 * methods up in it, its flags decide where a call runs and who may make
 * it, and the per-method counters follow its order.
 */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/certinfo.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/jsonw.h"
#include "common/wire.h"

static json_t *m_evaluate(struct tsec__daemon *, struct tsec__call *, json_t **);
static json_t *m_check(struct tsec__daemon *, struct tsec__call *, json_t **);
static json_t *m_health(struct tsec__daemon *, struct tsec__call *, json_t **);
static json_t *m_stats(struct tsec__daemon *, struct tsec__call *, json_t **);
static json_t *m_reload(struct tsec__daemon *, struct tsec__call *, json_t **);
static json_t *m_publish(struct tsec__daemon *, struct tsec__call *, json_t **);

const struct tsec__method tsec__methods[] = {
	{ "evaluate",     m_evaluate,           TSEC_M_INLINE },
	{ "check",        m_check,              TSEC_M_INLINE },
	{ "health",       m_health,             TSEC_M_INLINE },
	{ "stats",        m_stats,              TSEC_M_INLINE },
	{ "reload",       m_reload,             TSEC_M_ADMIN },
	{ "policy.publish", m_publish,          TSEC_M_ADMIN | TSEC_M_STORAGE },
	{ "store.put",    tsec__m_store_put,    TSEC_M_STORAGE | TSEC_M_FRAMES },
	{ "store.put_many", tsec__m_store_put_many, TSEC_M_STORAGE | TSEC_M_FRAMES },
	{ "store.get",    tsec__m_store_get,    TSEC_M_STORAGE },
	{ "store.exists", tsec__m_store_exists, TSEC_M_STORAGE },
	{ "store.delete", tsec__m_store_delete, TSEC_M_STORAGE },
	{ "store.list",   tsec__m_store_list,   TSEC_M_STORAGE },
	{ "store.stat",   tsec__m_store_stat,   TSEC_M_STORAGE },
	{ "store.move",   tsec__m_store_move,   TSEC_M_STORAGE },
	{ "store.save_cert", tsec__m_store_save_cert, TSEC_M_STORAGE | TSEC_M_FRAMES },
	{ "store.load_cert", tsec__m_store_load_cert, TSEC_M_STORAGE },
	{ "remote.publish", tsec__m_remote_publish, TSEC_M_STORAGE | TSEC_M_FRAMES },
	{ "remote.load",  tsec__m_remote_load,  TSEC_M_STORAGE },
	{ "remote.exists", tsec__m_remote_exists, TSEC_M_STORAGE },
	{ "remote.archive_key", tsec__m_remote_archive_key, TSEC_M_STORAGE },
	{ "remote.load_archived", tsec__m_remote_load_archived, TSEC_M_STORAGE },
	{ "remote.sweep", tsec__m_remote_sweep, TSEC_M_ADMIN | TSEC_M_STORAGE },
	{ "lock.acquire", tsec__m_lock_acquire, TSEC_M_STORAGE },
	{ "lock.renew",   tsec__m_lock_renew,   TSEC_M_STORAGE },
	{ "lock.release", tsec__m_lock_release, TSEC_M_STORAGE },
	{ "batch",        tsec__m_batch,        TSEC_M_STORAGE | TSEC_M_FRAMES },
};
const size_t tsec__nmethods = sizeof(tsec__methods) / sizeof(tsec__methods[0]);
const struct tsec__method *const tsec__method_check = &tsec__methods[1];

const struct tsec__method *tsec__method_find(const char *name, size_t len)
{
	/* The first byte rules out most names before a length is taken. */
	for (size_t i = 0; len && i < tsec__nmethods; i++)
		if (tsec__methods[i].name[0] == name[0] && strlen(tsec__methods[i].name) == len &&
		    !memcmp(tsec__methods[i].name, name, len))
			return &tsec__methods[i];
	return NULL;
}

/*
 * Writes s[0..n) as a JSON string, cut to `max` bytes (on a UTF-8
 * boundary) with a marker saying how much was cut when it is longer.
 */
static void clipped(struct tsec__jw *w, const char *s, size_t n, size_t max)
{
	char buf[TSEC_DECLOG_FIELD_MAX + 64];
	size_t k;

	/* No field is kept longer than buf holds with its marker. */
	if (max > TSEC_DECLOG_FIELD_MAX)
		max = TSEC_DECLOG_FIELD_MAX;
	k = n < max ? n : max;
	if (n <= max) {
		tsec__jw_str(w, s, n);
		return;
	}
	while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
		k--;
	/* Copied, not formatted: a NUL in the field stays (escaped). */
	memcpy(buf, s, k);
	k += (size_t)snprintf(buf + k, sizeof(buf) - k, "...[%zu bytes cut]", n - k);
	tsec__jw_str(w, buf, k);
}

/*
 * The request id as JSON text, made once per call: a caller's id may be
 * of any JSON type (jansson writes what is not a number or a string).
 */
const char *tsec__call_id(struct tsec__call *c, size_t *n)
{
	if (!c->id_text) {
		struct tsec__jw w;

		if (!c->id || json_is_null(c->id) || json_is_integer(c->id)) {
			/* The usual id: into the call itself, no allocation. */
			tsec__jw_init_on(&w, c->id_small, sizeof(c->id_small));
			if (json_is_integer(c->id))
				tsec__jw_int(&w, (int64_t)json_integer_value(c->id));
			else
				TSEC__JW_LIT(&w, "null");
			c->id_text = w.buf;     /* c->id_small, unless it grew */
			c->id_len = w.len;
			*n = c->id_len;
			return c->id_text;
		}
		tsec__jw_init(&w);
		if (json_is_string(c->id)) {
			tsec__jw_str(&w, json_string_value(c->id), json_string_length(c->id));
		} else {
			char *t = tsec__json_text(c->id, JSON_COMPACT | JSON_ENCODE_ANY);
			if (t)
				tsec__jw_raw(&w, t, strlen(t));
			else
				tsec__jw_cstr(&w, "[unprintable id]");
			free(t);
		}
		c->id_text = tsec__jw_take(&w, &c->id_len);
		if (!c->id_text) {
			*n = 4;
			return "null";
		}
	}
	*n = c->id_len;
	return c->id_text;
}

/*
 * A certificate's attributes for the log, parsed once per certificate:
 * each thread keeps the last it parsed, by the SHA-256 of its bytes
 * (already taken for the log), so the decisions of one call, or calls
 * in a row, that carry the same certificate (a save and its retry, a
 * publish, `tsec replay`'s input) parse it once.  0, or -1 when the
 * bytes hold no certificate.
 */
static int certinfo_once(const unsigned char sha[crypto_hash_sha256_BYTES], const char *pem,
			 size_t len, const struct tsec__certinfo **out)
{
	static _Thread_local struct {
		bool set;
		int rc;
		unsigned char sha[crypto_hash_sha256_BYTES];
		struct tsec__certinfo ci;
	} last;

	if (!last.set || memcmp(last.sha, sha, sizeof(last.sha))) {
		last.rc = tsec__certinfo_of(pem, len, &last.ci);
		memcpy(last.sha, sha, sizeof(last.sha));
		last.set = true;
	}
	*out = &last.ci;
	return last.rc;
}

/* The request's context as the log keeps it: never a certificate's
 * bytes, its SHA-256. */
static void context_write(struct tsec__jw *w, const struct tsec_context *x, size_t max)
{
	uint32_t has = x ? x->has : 0;
	const struct tsec__certinfo *ci;
	bool first = true;

	TSEC__JW_LIT(w, "{");
#define MEMBER(name) do { if (!first) TSEC__JW_LIT(w, ","); \
		TSEC__JW_LIT(w, "\"" name "\":"); first = false; } while (0)
	if (has & TSEC_CTX_TTL_MS) {
		MEMBER("ttl_ms");
		tsec__jw_uint(w, x->ttl_ms);
	}
	if (has & TSEC_CTX_SIZE) {
		MEMBER("size");
		tsec__jw_uint(w, x->size);
	}
	if (has & TSEC_CTX_RECURSIVE) {
		MEMBER("recursive");
		tsec__jw_bool(w, x->recursive);
	}
	if (has & TSEC_CTX_DEST) {
		MEMBER("dest");
		clipped(w, x->dest.ptr ? x->dest.ptr : "", x->dest.len, max);
	}
	if (has & TSEC_CTX_NOW) {
		MEMBER("now");
		tsec__jw_int(w, x->now);
	}
	if (has & TSEC_CTX_CERT_PEM) {
		unsigned char h[crypto_hash_sha256_BYTES];
		char hex[65];

		crypto_hash_sha256(h, (const unsigned char *)x->cert_pem.ptr, x->cert_pem.len);
		sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
		MEMBER("cert_pem_sha256");
		tsec__jw_cstr(w, hex);
		/* Its non-secret attributes, so that `tsec replay` can decide
		 * the request again (parsing is tens of microseconds, and only
		 * a request carrying a certificate pays it, once per
		 * certificate: the same bytes again reuse the parse). */
		if (!certinfo_once(h, x->cert_pem.ptr, x->cert_pem.len, &ci)) {
			MEMBER("cert");
			TSEC__JW_LIT(w, "{\"names\":[");
			for (unsigned i = 0; i < ci->nnames; i++) {
				if (i)
					TSEC__JW_LIT(w, ",");
				clipped(w, ci->names[i], strlen(ci->names[i]), max);
			}
			TSEC__JW_LIT(w, "],\"not_after\":");
			tsec__jw_int(w, ci->not_after);
			TSEC__JW_LIT(w, ",\"key\":");
			tsec__jw_cstr(w, ci->key);
			TSEC__JW_LIT(w, ",\"bits\":");
			tsec__jw_uint(w, ci->bits);
			TSEC__JW_LIT(w, ",\"issuer\":");
			clipped(w, ci->issuer, strlen(ci->issuer), max);
			TSEC__JW_LIT(w, "}");
		}
	}
#undef MEMBER
	TSEC__JW_LIT(w, "}");
}

/* What one decision-log line says, but for how hard it is cut. */
struct line {
	struct tsec__daemon *d;
	struct tsec__call *c;
	uint64_t seq;                        /* the decision's number here */
	const struct tsec__policy_text *ptext;   /* or, when NULL, pid */
	struct tsec__policy_id pid;
	int64_t now_ms;
	const struct tsec_str *action, *resource;
	const struct tsec_context *ctx;
	const struct tsec_decision *dec;
	const struct tsec__why_not *why;     /* NULL: none */
	int64_t latency_ns;
};

/*
 * One decision-log line, written straight into text (the members in the
 * order the log has always had).  The caller's action, resource and
 * destination are cut to `max` bytes, the id's text to `idmax`.  With
 * `last`, the last resort: every field that is not of fixed size (the
 * principal and roles, the rules' ids) cut hard too, so that the line
 * fits whatever it holds, with "cut": true.
 */
static void line_write(struct tsec__jw *w, struct line *l, size_t idmax, size_t max, bool last)
{
	const struct tsec__caller *who = l->c->who;
	const struct tsec_decision *dec = l->dec;
	size_t idn;
	const char *id = tsec__call_id(l->c, &idn);

	TSEC__JW_LIT(w, "{\"time_ms\":");
	tsec__jw_int(w, l->now_ms);
	/* The broker's id and the policy's SHA-256 are hex: copied, not
	 * escaped; the decision's number without snprintf. */
	TSEC__JW_LIT(w, ",\"decision_id\":\"");
	tsec__jw_raw(w, l->d->broker_id, strlen(l->d->broker_id));
	TSEC__JW_LIT(w, "-");
	tsec__jw_uint(w, l->seq);
	TSEC__JW_LIT(w, "\",\"broker\":\"");
	tsec__jw_raw(w, l->d->broker_id, strlen(l->d->broker_id));
	TSEC__JW_LIT(w, "\",\"id\":");
	if (idn <= idmax)
		tsec__jw_raw(w, id, idn);
	else
		clipped(w, id, idn, idmax);
	if (!last && who->log_who) {
		/* Escaped once, when the configuration was read (config.c). */
		tsec__jw_raw(w, who->log_who, who->log_who_len);
	} else {
		TSEC__JW_LIT(w, ",\"principal\":");
		clipped(w, who->principal, strlen(who->principal), max);
		TSEC__JW_LIT(w, ",\"roles\":[");
		for (uint32_t i = 0; i < who->nroles && !(last && i == 4); i++) {
			if (i)
				TSEC__JW_LIT(w, ",");
			clipped(w, who->roles[i].ptr, who->roles[i].len, max);
		}
		TSEC__JW_LIT(w, "]");
	}
	if (l->ptext) {
		/* Made once per policy (policy.c). */
		tsec__jw_raw(w, l->ptext->text, l->ptext->len);
	} else {
		TSEC__JW_LIT(w, ",\"policy_sha256\":\"");
		tsec__jw_raw(w, l->pid.sha256, strnlen(l->pid.sha256, sizeof(l->pid.sha256)));
		TSEC__JW_LIT(w, "\",\"policy_revision\":");
		tsec__jw_int(w, l->pid.revision);
	}
	TSEC__JW_LIT(w, ",\"action\":");
	clipped(w, l->action->ptr ? l->action->ptr : "", l->action->len, max);
	TSEC__JW_LIT(w, ",\"resource\":");
	clipped(w, l->resource->ptr ? l->resource->ptr : "", l->resource->len, max);
	TSEC__JW_LIT(w, ",\"context\":");
	context_write(w, l->ctx, max);
	if (dec->allow)
		TSEC__JW_LIT(w, ",\"decision\":\"allow\",\"status\":\"");
	else
		TSEC__JW_LIT(w, ",\"decision\":\"deny\",\"status\":\"");
	/* Our own names (wire.c), plain letters: copied. */
	tsec__jw_raw(w, tsec__status_name(dec->status), strlen(tsec__status_name(dec->status)));
	TSEC__JW_LIT(w, "\"");
	TSEC__JW_LIT(w, ",\"rules\":");
	if (last)
		TSEC__JW_LIT(w, "[]");
	else
		tsec__decision_rules_write(w, dec);
	TSEC__JW_LIT(w, ",\"floor\":");
	tsec__jw_bool(w, dec->status == TSEC_STATUS_FLOOR);
	if (l->why && l->why->n && !last) {
		TSEC__JW_LIT(w, ",\"why_not\":");
		tsec__why_not_write(w, l->why, max);
	}
	TSEC__JW_LIT(w, ",\"latency_ns\":");
	tsec__jw_int(w, l->latency_ns);
	if (last)
		TSEC__JW_LIT(w, ",\"cut\":true");
	TSEC__JW_LIT(w, "}");
}

/* The hardest cut of the last resort: 16 bytes a field, 6 once escaped. */
#define LAST_CUT 16

/*
 * Why a request nothing allowed was denied: the rules that matched it but
 * did not apply, and the condition each failed (the module's explain).
 * Only for a default deny (a floor or a deny names its rule already);
 * the report and explanation are tens of kilobytes, so they are
 * allocated here, on the deny path only, never for an allow.
 */
void tsec__why_not_of(struct tsec__daemon *d, const struct tsec_request *r,
		      const struct tsec_decision *dec, struct tsec__why_not *out)
{
	struct tsec_report *rep;
	struct tsec_explain *ex;
	struct tsec_error err;

	out->n = 0;
	if (dec->allow || dec->status != TSEC_STATUS_DEFAULT)
		return;
	rep = malloc(sizeof(*rep));
	ex = malloc(sizeof(*ex));
	if (rep && ex && !tsec_bus_explain(d->bus, "policy", r, rep, ex, &err) && ex->explained)
		for (uint32_t k = 0; k < ex->nnot_applied && out->n < TSEC__WHY_NOT_MAX; k++) {
			struct tsec__why_not_one *o = &out->v[out->n++];

			memcpy(o->rule, ex->not_applied[k].rule, sizeof(o->rule));
			memcpy(o->why, ex->not_applied[k].why, sizeof(o->why));
			o->rule[sizeof(o->rule) - 1] = o->why[sizeof(o->why) - 1] = '\0';
			o->dest = ex->not_applied[k].dest;
		}
	free(rep);
	free(ex);
}

void tsec__why_not_write(struct tsec__jw *w, const struct tsec__why_not *y, size_t max)
{
	TSEC__JW_LIT(w, "[");
	for (unsigned i = 0; i < y->n; i++) {
		if (i)
			TSEC__JW_LIT(w, ",");
		TSEC__JW_LIT(w, "{\"rule\":");
		tsec__jw_cstr(w, y->v[i].rule);
		TSEC__JW_LIT(w, ",\"why\":");
		clipped(w, y->v[i].why, strlen(y->v[i].why), max);
		if (y->v[i].dest)
			TSEC__JW_LIT(w, ",\"at\":\"destination\"");
		TSEC__JW_LIT(w, "}");
	}
	TSEC__JW_LIT(w, "]");
}

void tsec__log_decision(struct tsec__daemon *d, struct tsec__call *c,
			const struct tsec_str *action, const struct tsec_str *resource,
			const struct tsec_context *ctx, const struct tsec_decision *dec,
			const struct tsec__why_not *why, int64_t latency_ns)
{
	struct line l;                       /* every member set below (no
						whole-struct zeroing: pid is
						read only without ptext) */
	/* One line on the stack: no allocation unless it outgrows this. */
	char buf[2048];
	struct tsec__jw w;

	if (!d->log)
		return;
	l.d = d;
	l.c = c;
	l.action = action;
	l.resource = resource;
	l.ctx = ctx;
	l.dec = dec;
	l.why = why;
	l.latency_ns = latency_ns;
	/* Unique across brokers and restarts without a syscall per line. */
	l.seq = atomic_fetch_add(&d->decisions, 1);
	if (!(l.ptext = atomic_load_explicit(&d->policy_text, memory_order_acquire))) {
		pthread_mutex_lock(&d->policy_lock);
		l.pid = d->policy;
		pthread_mutex_unlock(&d->policy_lock);
	}
	l.now_ms = tsec__wall_ms();
	/*
	 * A decision is never dropped for its size: the caller's fields are
	 * cut (with a marker) until the line fits.  Escapes can make a field
	 * six times its bytes, so each pass cuts eight times harder; the
	 * last resort cuts every field that is not of fixed size, so the
	 * line fits: its fixed fields are under 400 bytes, and each of its
	 * at most nine cut fields under 140.
	 */
	tsec__jw_init_on(&w, buf, sizeof(buf));
	line_write(&w, &l, TSEC_DECLOG_FIELD_MAX, TSEC_DECLOG_FIELD_MAX, false);
	for (size_t max = TSEC_DECLOG_FIELD_MAX / 8;
	     !w.failed && w.len > TSEC_DECLOG_LINE_MAX && max >= 2; max /= 8) {
		tsec__jw_free(&w);
		tsec__jw_init_on(&w, buf, sizeof(buf));
		line_write(&w, &l, max, max, false);
	}
	if (!w.failed && w.len > TSEC_DECLOG_LINE_MAX) {
		tsec__jw_free(&w);
		tsec__jw_init_on(&w, buf, sizeof(buf));
		line_write(&w, &l, LAST_CUT, LAST_CUT, true);
	}
	if (!w.failed)
		tsec__declog_push(d->log, w.buf, w.len);
	tsec__jw_free(&w);
}

/*
 * The store's observer: one log line per decision the store's own policy
 * checks made (storage and lock calls), with the deciding rules.  The
 * call comes back through the principal's call_ctx, so a store used by
 * anything but a call of ours logs nothing here.
 */
void tsec__observe(void *ctx, void *call_ctx, const struct tsec_request *reqs,
		   const struct tsec_decision *dec, size_t n, uint64_t latency_ns)
{
	struct tsec__daemon *d = ctx;
	struct tsec__call *c = call_ctx;

	if (!c)
		return;
	for (size_t i = 0; i < n; i++) {
		struct tsec__why_not why;        /* for the log only: made only
						    when there is one */

		why.n = 0;
		if (d->log)
			tsec__why_not_of(d, &reqs[i], &dec[i], &why);
		tsec__log_decision(d, c, &reqs[i].action, &reqs[i].resource, &reqs[i].ctx,
				   &dec[i], &why, (int64_t)(latency_ns / n));
		if (!dec[i].allow)
			atomic_fetch_add(&d->st.denied, 1);
		if (!dec[i].allow && !c->deny.set) {
			c->deny.set = true;
			c->deny.status = dec[i].status;
			c->deny.nrules = dec[i].nrules < TSEC_DECISION_RULES ? dec[i].nrules
									      : TSEC_DECISION_RULES;
			/* Bounded by the module's arrays, not by a NUL it may
			 * not have written. */
			for (unsigned j = 0; j < c->deny.nrules; j++)
				snprintf(c->deny.rules[j], sizeof(c->deny.rules[j]), "%.*s",
					 (int)strnlen(dec[i].rules[j], TSEC_ID_MAX), dec[i].rules[j]);
		}
	}
}

/*
 * Decodes one request of the payload; the principal is the caller's, and
 * the clock the server's unless the configuration lets admin callers set
 * it (for tests of time-bound conditions).
 */
static json_t *request_of(const struct tsec__daemon *d, const struct tsec__call *c,
			  json_t *v, struct tsec_request *r)
{
	struct tsec_error err;

	if (tsec__request_from_json(v, r, d->cfg.allow_caller_clock && c->who->admin, &err))
		return tsec__err_json(&err);
	r->principal = c->p.id;
	r->roles = c->p.roles;
	r->nroles = c->p.nroles;
	return NULL;
}

static json_t *m_check(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	json_t *reqs = json_object_get(c->params, "requests"), *v, *e;
	struct tsec_request r[TSEC_D_MAX_BATCH];
	size_t i, n;

	(void)result;
	if (!json_is_array(reqs) || (n = json_array_size(reqs)) == 0 || n > TSEC_D_MAX_BATCH)
		return tsec__fail(TSEC_EPROTO, "params.requests", "need an array of 1-256 requests");
	json_array_foreach(reqs, i, v)
		if ((e = request_of(d, c, v, &r[i])))
			return e;
	return tsec__check_requests(d, c, r, n);
}

json_t *tsec__check_requests(struct tsec__daemon *d, struct tsec__call *c,
			     struct tsec_request *r, size_t n)
{
	struct tsec__jw w;
	json_t *e;

	/* The result as text, which tsec__dispatch wraps: no tree to build. */
	tsec__jw_init(&w);
	if ((e = tsec__check_requests_into(d, c, r, n, &w))) {
		tsec__jw_free(&w);
		return e;
	}
	if (!(c->result_text = tsec__jw_take(&w, &c->result_len)))
		return tsec__fail(TSEC_ENOMEM, "", NULL);
	return NULL;
}

/*
 * A Check through the policy endpoint's handle, found once and kept
 * (endpoints are never unloaded); until the bus has one, by name, whose
 * error says there is none.
 */
static int check_policy(struct tsec__daemon *d, const struct tsec_request *r, size_t n,
			struct tsec_decision *dec, struct tsec_error *err)
{
	struct tsec_endpoint *ep = atomic_load_explicit(&d->policy_ep, memory_order_acquire);

	if (!ep && (ep = tsec_bus_endpoint(d->bus, "policy")))
		atomic_store_explicit(&d->policy_ep, ep, memory_order_release);
	return ep ? tsec_endpoint_check(ep, r, n, dec, err)
		  : tsec_bus_check(d->bus, "policy", r, n, dec, err);
}

json_t *tsec__check_requests_into(struct tsec__daemon *d, struct tsec__call *c,
				  struct tsec_request *r, size_t n, struct tsec__jw *w)
{
	struct tsec_decision dec[TSEC_D_MAX_BATCH];
	struct tsec_error err;
	int64_t t0, lat;
	size_t i;

	t0 = (int64_t)tsec__mono_ns();
	if (check_policy(d, r, n, dec, &err))
		return tsec__err_json(&err);
	lat = ((int64_t)tsec__mono_ns() - t0) / (int64_t)n;
	TSEC__JW_LIT(w, "{\"decisions\":[");
	for (i = 0; i < n; i++) {
		struct tsec__why_not why;        /* only .n read while it is 0 */

		why.n = 0;
		if (!dec[i].allow) {
			atomic_fetch_add(&d->st.denied, 1);
			tsec__why_not_of(d, &r[i], &dec[i], &why);
		}
		tsec__log_decision(d, c, &r[i].action, &r[i].resource, &r[i].ctx, &dec[i], &why,
				   lat);
		if (i)
			TSEC__JW_LIT(w, ",");
		tsec__decision_write_open(w, &dec[i]);
		if (why.n) {
			TSEC__JW_LIT(w, ",\"why_not\":");
			tsec__why_not_write(w, &why, TSEC_DETAIL_MAX);
		}
		TSEC__JW_LIT(w, "}");
	}
	TSEC__JW_LIT(w, "]}");
	return NULL;
}

static json_t *m_evaluate(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_request r;
	struct tsec_report *rep;
	struct tsec_error err;
	json_t *e;

	if ((e = request_of(d, c, json_object_get(c->params, "request"), &r)))
		return e;
	/* A report is tens of kilobytes: too big for a worker's stack. */
	rep = malloc(sizeof(*rep));
	if (!rep)
		return tsec__fail(TSEC_ENOMEM, "", NULL);
	{
		/* With why-not when the module has it (ABI 1.3). */
		struct tsec_explain *ex = malloc(sizeof(*ex));
		int rc = ex ? tsec_bus_explain(d->bus, "policy", &r, rep, ex, &err)
			    : tsec__seterr(&err, TSEC_ENOMEM, "", NULL);

		if (rc) {
			e = tsec__err_json(&err);
		} else {
			*result = tsec__report_to_json(rep);
			tsec__explain_to_json(*result, ex, &r);
		}
		free(ex);
	}
	free(rep);
	return e;
}

/* The store's backend, what its configuration promises, and its
 * LocalCache's feed: live or not, since when, and why not. */
static json_t *storage_json(struct tsec__daemon *d)
{
	struct tsec_store_info in;
	json_t *o;

	tsec_store_info(d->store, &in);
	o = json_pack("{s:s}", "backend", in.backend);
	if (in.note[0])
		json_object_set_new(o, "note", json_string(in.note));
	if (in.cached)
		json_object_set_new(o, "cache", json_pack(
			"{s:b,s:b,s:I,s:I,s:I,s:I,s:s}", "feed", in.feed, "live", in.live,
			"bound_ms", (json_int_t)in.bound_ms,
			"proven_ms_ago", (json_int_t)in.proven_ms_ago,
			"hits", (json_int_t)in.hits, "misses", (json_int_t)in.misses,
			"why", in.why));
	return o;
}

/* The remote certificate store: its blob store as last asked, and what
 * it refused or mended. */
static json_t *remote_json(struct tsec__daemon *d, json_t *degraded)
{
	struct tsec_remote_stats rs;

	tsec_remote_stats(d->remote, &rs);
	return json_pack("{s:o,s:I,s:I,s:I,s:I,s:I}", "blob_store", tsec__probe_json(d, degraded),
			 "refused", (json_int_t)rs.refused, "rollbacks", (json_int_t)rs.rollbacks,
			 "corrupt", (json_int_t)rs.corrupt, "repaired", (json_int_t)rs.repaired,
			 "conflicts", (json_int_t)rs.conflicts);
}

static json_t *m_health(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	(void)c;
	*result = tsec__health_json(d);
	return NULL;
}

/* The fleet's record older than what runs here, or gone after a
 * publish: replayed, frozen or removed by whoever can write the backend
 * (fleet.c learns the newer revision from the other brokers' records). */
static void fleet_behind(struct tsec__daemon *d, const struct tsec__policy_id *id, json_t *why)
{
	long long rec = atomic_load(&d->fleet_record_rev);
	long long top = atomic_load(&d->fleet_newest);
	char msg[200];

	if (rec >= 0 && rec < id->revision)
		snprintf(msg, sizeof(msg), "the fleet's policy bundle is at revision %lld, below "
			 "the %lld running here: replayed or frozen; publish again", rec,
			 id->revision);
	else if (rec == -2 && top >= 0)
		snprintf(msg, sizeof(msg), "the fleet's policy bundle is missing, though revision "
			 "%lld was published: publish again", top);
	else
		return;
	json_array_append_new(why, json_string(msg));
}

json_t *tsec__health_json(struct tsec__daemon *d)
{
	struct tsec_module_info info;
	struct tsec__policy_id id;
	json_t *why = json_array(), *res, *remote = NULL;
	int64_t now = tsec__wall_ms(), read;

	tsec_bus_info(d->bus, "policy", &info);
	pthread_mutex_lock(&d->policy_lock);
	id = d->policy;
	pthread_mutex_unlock(&d->policy_lock);
	/* Degraded: still serving, but something an operator must see. */
	if (id.expires_s && id.expires_s * 1000 <= now)
		json_array_append_new(why, json_string("the running policy has expired: a newer "
						       "revision did not arrive"));
	if (d->remote)
		remote = remote_json(d, why);
	if (tsec__fleet_shared(d) && d->cfg.st.watch_policy) {
		read = atomic_load(&d->fleet_read_ms);
		if (atomic_load(&d->fleet_refused))
			json_array_append_new(why, json_string("the fleet's policy bundle was refused "
							       "(see the broker's log)"));
		if (now - (read ? read : d->started_ms) > TSEC_D_FLEET_STALE_MS)
			json_array_append_new(why, json_string("the fleet's policy bundle has not "
							       "been read lately"));
		fleet_behind(d, &id, why);
	}
	res = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:b,s:I}", "status",
			json_array_size(why) ? "degraded" : "ok", "module", info.name,
			"version", info.version, "build", tsec_build_name(info.build),
			"policy_sha256", id.sha256, "policy_revision", (json_int_t)id.revision,
			"policy_signed", d->cfg.have_pk,
			"policy_loaded_ms", (json_int_t)id.loaded_ms);
	if (res) {
		if (id.expires_s)
			json_object_set_new(res, "policy_expires_ms",
					    json_integer((json_int_t)id.expires_s * 1000));
		if (d->cfg.fleet_id)
			json_object_set_new(res, "fleet_id", json_string(d->cfg.fleet_id));
		if (tsec__fleet_shared(d) && d->cfg.st.watch_policy) {
			json_object_set_new(res, "fleet_revision", json_integer(
				(json_int_t)atomic_load(&d->fleet_record_rev)));
			json_object_set_new(res, "fleet_newest_revision", json_integer(
				(json_int_t)atomic_load(&d->fleet_newest)));
		}
		if (json_array_size(why))
			json_object_set(res, "degraded", why);
		json_object_set_new(res, "storage", storage_json(d));
		if (remote)
			json_object_set(res, "remote", remote);
	}
	json_decref(remote);
	json_decref(why);
	return res;
}

json_t *tsec__stats_json(struct tsec__daemon *d)
{
	json_t *bym = json_object(), *lat = json_object(), *bounds = json_array(), *st;
	struct tsec_store_info in;

	for (unsigned b = 0; b < TSEC_LAT_BUCKETS; b++)
		json_array_append_new(bounds, json_integer(tsec__lat_bounds_us[b]));
	for (size_t i = 0; i < tsec__nmethods; i++) {
		const struct tsec__hist *h = &d->st.hist[i];
		json_t *cum = json_array();
		uint64_t run = 0;

		json_object_set_new(bym, tsec__methods[i].name,
				    json_integer((json_int_t)atomic_load(&d->st.by_method[i])));
		for (unsigned b = 0; b <= TSEC_LAT_BUCKETS; b++) {
			run += atomic_load(&h->bucket[b]);
			json_array_append_new(cum, json_integer((json_int_t)run));
		}
		json_object_set_new(lat, tsec__methods[i].name,
				    json_pack("{s:o,s:I}", "cumulative", cum, "sum_ns",
					      (json_int_t)atomic_load(&h->sum_ns)));
	}
	st = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o}",
		"uptime_ms", (json_int_t)(tsec__wall_ms() - d->started_ms),
		"log_written", (json_int_t)tsec__declog_written(d->log),
		"log_dropped", (json_int_t)tsec__declog_dropped(d->log),
		"locks_held", (json_int_t)tsec__held_count(&d->held),
		"lock_waits", (json_int_t)atomic_load(&d->lock_waits),
		"calls_queued", (json_int_t)atomic_load(&d->calls_queued),
		"by_method", bym, "latency", lat, "latency_bounds_us", bounds);
	/* The counters, from their one list (common/stats.h). */
#define C(f, name, help) \
	json_object_set_new(st, #f, json_integer((json_int_t)atomic_load(&d->st.f)));
	if (st) {
		TSEC_STAT_COUNTERS(C)
	}
#undef C
	/* What is running, for the info metrics: build, module, policy. */
	if (st) {
		struct tsec_module_info info;
		struct tsec__policy_id id;

		tsec_bus_info(d->bus, "policy", &info);
		pthread_mutex_lock(&d->policy_lock);
		id = d->policy;
		pthread_mutex_unlock(&d->policy_lock);
		json_object_set_new(st, "info", json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}",
			"version", TSEC_VERSION, "build", tsec_build_name(TSEC_BUILD_THIS),
			"module", info.name, "policy_sha256", id.sha256,
			"policy_revision", (json_int_t)id.revision,
			"policy_loaded_ms", (json_int_t)id.loaded_ms));
	}
	if (st && d->remote) {
		struct tsec_remote_stats rs;

		tsec_remote_stats(d->remote, &rs);
		json_object_set_new(st, "remote_refused", json_integer((json_int_t)rs.refused));
		json_object_set_new(st, "remote_rollbacks", json_integer((json_int_t)rs.rollbacks));
		json_object_set_new(st, "remote_corrupt", json_integer((json_int_t)rs.corrupt));
		json_object_set_new(st, "remote_repaired", json_integer((json_int_t)rs.repaired));
		json_object_set_new(st, "remote_conflicts", json_integer((json_int_t)rs.conflicts));
	}
	tsec_store_info(d->store, &in);
	if (st && in.cached) {
		json_object_set_new(st, "cache_hits", json_integer((json_int_t)in.hits));
		json_object_set_new(st, "cache_misses", json_integer((json_int_t)in.misses));
		json_object_set_new(st, "cache_live", json_integer(in.live));
		json_object_set_new(st, "cache_bound_ms", json_integer((json_int_t)in.bound_ms));
		json_object_set_new(st, "cache_proven_ms_ago",
				    json_integer((json_int_t)in.proven_ms_ago));
	}
	return st;
}

static json_t *m_stats(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	(void)c;
	*result = tsec__stats_json(d);
	return NULL;
}

/* {"policy": TEXT, "signature": HEX}: the fleet's new policy. */
static json_t *m_publish(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	json_t *pol = json_object_get(c->params, "policy");
	const char *sig = json_string_value(json_object_get(c->params, "signature"));
	struct tsec__policy_id id;
	struct tsec_error err;

	if (!json_is_string(pol) || !sig)
		return tsec__fail(TSEC_EPROTO, "params", "need \"policy\" (text) and \"signature\" "
				  "(hex)");
	if (tsec__fleet_publish(d, json_string_value(pol), json_string_length(pol), sig, &id,
				&err))
		return tsec__err_json(&err);
	*result = json_pack("{s:s,s:I}", "policy_sha256", id.sha256, "policy_revision",
			    (json_int_t)id.revision);
	return NULL;
}

static json_t *m_reload(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_error err;

	(void)c;
	if (tsec__policy_reload(d, &err))
		return tsec__err_json(&err);
	*result = json_object();
	return NULL;
}
