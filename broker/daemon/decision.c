/*
 * tsec-broker: what a decision log line says (the call, the principal,
 * each request and its context clipped to the line's room, the
 * certificate's attributes parsed once per certificate, the deciding
 * or nearest rule), written by the policy and storage calls alike;
 * declog.c queues and writes the lines.
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
