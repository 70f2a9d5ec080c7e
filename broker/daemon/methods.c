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
#include "common/clock.h"
#include "common/error.h"
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
	{ "store.put",    tsec__m_store_put,    TSEC_M_STORAGE },
	{ "store.get",    tsec__m_store_get,    TSEC_M_STORAGE },
	{ "store.exists", tsec__m_store_exists, TSEC_M_STORAGE },
	{ "store.delete", tsec__m_store_delete, TSEC_M_STORAGE },
	{ "store.list",   tsec__m_store_list,   TSEC_M_STORAGE },
	{ "store.stat",   tsec__m_store_stat,   TSEC_M_STORAGE },
	{ "store.move",   tsec__m_store_move,   TSEC_M_STORAGE },
	{ "store.save_cert", tsec__m_store_save_cert, TSEC_M_STORAGE },
	{ "store.load_cert", tsec__m_store_load_cert, TSEC_M_STORAGE },
	{ "lock.acquire", tsec__m_lock_acquire, TSEC_M_STORAGE },
	{ "lock.renew",   tsec__m_lock_renew,   TSEC_M_STORAGE },
	{ "lock.release", tsec__m_lock_release, TSEC_M_STORAGE },
};
const size_t tsec__nmethods = sizeof(tsec__methods) / sizeof(tsec__methods[0]);

const struct tsec__method *tsec__method_find(const char *name, size_t len)
{
	for (size_t i = 0; i < tsec__nmethods; i++)
		if (strlen(tsec__methods[i].name) == len &&
		    !memcmp(tsec__methods[i].name, name, len))
			return &tsec__methods[i];
	return NULL;
}

/*
 * The text of s[0..n) cut to `max` bytes (on a UTF-8 boundary) with a
 * marker saying how much was cut; NULL if it needs no cut.  New JSON.
 */
static json_t *clipped(const char *s, size_t n, size_t max)
{
	char buf[TSEC_DECLOG_FIELD_MAX + 64];
	size_t k = n < max ? n : max;

	if (n <= max)
		return NULL;
	while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
		k--;
	snprintf(buf, sizeof(buf), "%.*s...[%zu bytes cut]", (int)k, s, n - k);
	return json_string(buf);
}

/* Cuts a string member to max bytes (see clipped). */
static void clip_member(json_t *o, const char *key, size_t max)
{
	json_t *v = json_object_get(o, key), *c;

	if (json_is_string(v) && (c = clipped(json_string_value(v), json_string_length(v), max)))
		json_object_set_new(o, key, c);
}

/*
 * The request id as logged: a caller's id of any JSON type, cut when its
 * text is long, so that no id can make a line too long to keep.
 */
static json_t *log_id(json_t *id, size_t max)
{
	char *text;
	json_t *c;

	if (!id)
		return json_null();
	if (!(text = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY)))
		return json_string("[unprintable id]");
	c = clipped(text, strlen(text), max);
	free(text);
	return c ? c : json_incref(id);
}

/* The request's context as the log keeps it: never a certificate's
 * bytes, its SHA-256. */
static json_t *context_json(const struct tsec_context *x)
{
	json_t *o = json_object();

	if (!x)
		return o;
	if (x->has & TSEC_CTX_TTL_MS)
		json_object_set_new(o, "ttl_ms", json_integer((json_int_t)x->ttl_ms));
	if (x->has & TSEC_CTX_SIZE)
		json_object_set_new(o, "size", json_integer((json_int_t)x->size));
	if (x->has & TSEC_CTX_RECURSIVE)
		json_object_set_new(o, "recursive", json_boolean(x->recursive));
	if (x->has & TSEC_CTX_DEST) {
		json_t *dv = clipped(x->dest.ptr, x->dest.len, TSEC_DECLOG_FIELD_MAX);

		json_object_set_new(o, "dest", dv ? dv : json_stringn(x->dest.ptr, x->dest.len));
	}
	if (x->has & TSEC_CTX_NOW)
		json_object_set_new(o, "now", json_integer((json_int_t)x->now));
	if (x->has & TSEC_CTX_CERT_PEM) {
		unsigned char h[crypto_hash_sha256_BYTES];
		char hex[65];

		crypto_hash_sha256(h, (const unsigned char *)x->cert_pem.ptr, x->cert_pem.len);
		sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
		json_object_set_new(o, "cert_pem_sha256", json_string(hex));
	}
	return o;
}

void tsec__log_decision(struct tsec__daemon *d, const struct tsec__call *c,
			const char *action, const char *resource, const struct tsec_context *ctx,
			int allow, const char *status, json_t *rules, int floor,
			int64_t latency_ns)
{
	json_t *o = json_object(), *roles;
	struct tsec__policy_id pid;
	char did[48];
	char *line;

	if (!d->log) {
		json_decref(o);
		return;
	}
	/* Unique across brokers and restarts without a syscall per line. */
	snprintf(did, sizeof(did), "%s-%llu", d->broker_id,
		 (unsigned long long)atomic_fetch_add(&d->decisions, 1));
	pthread_mutex_lock(&d->policy_lock);
	pid = d->policy;
	pthread_mutex_unlock(&d->policy_lock);
	roles = json_array();
	for (uint32_t i = 0; i < c->who->nroles; i++)
		json_array_append_new(roles, json_stringn(c->who->roles[i].ptr, c->who->roles[i].len));
	json_object_set_new(o, "time_ms", json_integer(tsec__wall_ms()));
	json_object_set_new(o, "decision_id", json_string(did));
	json_object_set_new(o, "broker", json_string(d->broker_id));
	json_object_set_new(o, "id", log_id(c->id, TSEC_DECLOG_FIELD_MAX));
	json_object_set_new(o, "principal", json_string(c->who->principal));
	json_object_set_new(o, "roles", roles);
	json_object_set_new(o, "policy_sha256", json_string(pid.sha256));
	json_object_set_new(o, "policy_revision", json_integer(pid.revision));
	json_object_set_new(o, "action", json_string(action ? action : ""));
	json_object_set_new(o, "resource", json_string(resource ? resource : ""));
	json_object_set_new(o, "context", context_json(ctx));
	json_object_set_new(o, "decision", json_string(allow ? "allow" : "deny"));
	json_object_set_new(o, "status", json_string(status));
	json_object_set_new(o, "rules", rules ? json_incref(rules) : json_array());
	json_object_set_new(o, "floor", json_boolean(floor));
	json_object_set_new(o, "latency_ns", json_integer(latency_ns));
	/*
	 * A decision is never dropped for its size: the caller's fields are
	 * cut (with a marker) until the line fits.  Escapes can make a field
	 * six times its bytes, so the second pass cuts harder.
	 */
	for (size_t max = TSEC_DECLOG_FIELD_MAX; ; max /= 8) {
		line = json_dumps(o, JSON_COMPACT);
		if (!line || strlen(line) <= TSEC_DECLOG_LINE_MAX || max < 16)
			break;
		free(line);
		json_object_set_new(o, "id", log_id(c->id, max / 8));
		clip_member(o, "resource", max / 8);
		clip_member(o, "action", max / 8);
	}
	if (line)
		tsec__declog_push(d->log, line, strlen(line));
	free(line);
	json_decref(o);
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
	const struct tsec__call *c = call_ctx;

	if (!c)
		return;
	for (size_t i = 0; i < n; i++) {
		json_t *dj = tsec__decision_to_json(&dec[i]);
		char action[32], res[TSEC_KEY_MAX + 1];
		tsec__strlcpy(action, reqs[i].action.ptr, reqs[i].action.len, sizeof(action));
		tsec__strlcpy(res, reqs[i].resource.ptr, reqs[i].resource.len, sizeof(res));
		tsec__log_decision(d, c, action, res, &reqs[i].ctx, dec[i].allow,
				   tsec__status_name(dec[i].status),
				   json_object_get(dj, "rules"),
				   dec[i].status == TSEC_STATUS_FLOOR,
				   (int64_t)(latency_ns / n));
		if (!dec[i].allow)
			atomic_fetch_add(&d->st.denied, 1);
		json_decref(dj);
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
	json_t *reqs = json_object_get(c->params, "requests"), *out, *v, *e;
	struct tsec_request r[TSEC_D_MAX_BATCH];
	struct tsec_decision dec[TSEC_D_MAX_BATCH];
	struct tsec_error err;
	int64_t t0, lat;
	size_t i, n;

	if (!json_is_array(reqs) || (n = json_array_size(reqs)) == 0 || n > TSEC_D_MAX_BATCH)
		return tsec__fail(TSEC_EPROTO, "params.requests", "need an array of 1-256 requests");
	json_array_foreach(reqs, i, v)
		if ((e = request_of(d, c, v, &r[i])))
			return e;
	t0 = (int64_t)tsec__mono_ns();
	if (tsec_bus_check(d->bus, "policy", r, n, dec, &err))
		return tsec__err_json(&err);
	lat = ((int64_t)tsec__mono_ns() - t0) / (int64_t)n;
	out = json_array();
	for (i = 0; i < n; i++) {
		json_t *dj = tsec__decision_to_json(&dec[i]);
		char res[TSEC_KEY_MAX + 1];
		tsec__strlcpy(res, r[i].resource.ptr, r[i].resource.len, sizeof(res));
		tsec__log_decision(d, c, json_string_value(json_object_get(json_array_get(reqs, i),
									   "action")),
				   res, &r[i].ctx, dec[i].allow, tsec__status_name(dec[i].status),
				   json_object_get(dj, "rules"),
				   dec[i].status == TSEC_STATUS_FLOOR, lat);
		if (!dec[i].allow)
			atomic_fetch_add(&d->st.denied, 1);
		json_array_append_new(out, dj);
	}
	*result = json_pack("{s:o}", "decisions", out);
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

static json_t *m_health(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_module_info info;

	struct tsec__policy_id id;

	(void)c;
	tsec_bus_info(d->bus, "policy", &info);
	pthread_mutex_lock(&d->policy_lock);
	id = d->policy;
	pthread_mutex_unlock(&d->policy_lock);
	*result = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:b}", "status", "ok", "module", info.name,
			    "version", info.version, "build", tsec_build_name(info.build),
			    "policy_sha256", id.sha256, "policy_revision", (json_int_t)id.revision,
			    "policy_signed", d->cfg.have_pk);
	return NULL;
}

json_t *tsec__stats_json(struct tsec__daemon *d)
{
	json_t *bym = json_object(), *lat = json_object(), *bounds = json_array();

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
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o}",
		"uptime_ms", (json_int_t)(tsec__wall_ms() - d->started_ms),
		"calls", (json_int_t)atomic_load(&d->st.calls),
		"errors", (json_int_t)atomic_load(&d->st.errors),
		"denied", (json_int_t)atomic_load(&d->st.denied),
		"malformed", (json_int_t)atomic_load(&d->st.malformed),
		"oversized", (json_int_t)atomic_load(&d->st.oversized),
		"principal_mismatch", (json_int_t)atomic_load(&d->st.mismatched),
		"zap_accepted", (json_int_t)atomic_load(&d->st.zap_ok),
		"zap_refused", (json_int_t)atomic_load(&d->st.zap_refused),
		"reloads", (json_int_t)atomic_load(&d->st.reloads),
		"reload_failures", (json_int_t)atomic_load(&d->st.reload_failures),
		"log_written", (json_int_t)tsec__declog_written(d->log),
		"log_dropped", (json_int_t)tsec__declog_dropped(d->log),
		"locks_held", (json_int_t)tsec__held_count(&d->held),
		"by_method", bym, "latency", lat, "latency_bounds_us", bounds);
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
