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
#include "broker/policytest/policytest.h"
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
#define TSEC__M_ROW(id, name, fn, flags) [TSEC__M_##id] = { name, fn, flags },
	TSEC__METHOD_LIST(TSEC__M_ROW)
#undef TSEC__M_ROW
};
const size_t tsec__nmethods = TSEC__M_COUNT;
const struct tsec__method *const tsec__method_check = &tsec__methods[TSEC__M_CHECK];

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

/* A default deny's near misses (nearmiss.c), as "near_miss" (issue 51,
 * item 3): the allows the policy's author most likely meant. */
static void near_miss_write(struct tsec__daemon *d, const struct tsec_request *r,
			    struct tsec__jw *w)
{
	char out[4][256];
	json_t *pol;
	int n;

	pthread_mutex_lock(&d->policy_lock);
	pol = json_incref(d->policy_json);
	pthread_mutex_unlock(&d->policy_lock);
	n = pol ? tsec__near_misses(pol, r, out, 4) : 0;
	json_decref(pol);
	if (!n)
		return;
	TSEC__JW_LIT(w, ",\"near_miss\":[");
	for (int i = 0; i < n; i++) {
		if (i)
			TSEC__JW_LIT(w, ",");
		tsec__jw_str(w, out[i], strlen(out[i]));
	}
	TSEC__JW_LIT(w, "]");
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
		if (!dec[i].allow && dec[i].status == TSEC_STATUS_DEFAULT)
			near_miss_write(d, &r[i], w);
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
