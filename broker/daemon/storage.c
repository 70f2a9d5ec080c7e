/*
 * tsec-broker: the store.* and lock.* calls.  Each checks its parameters,
 * then calls the gated store as the authenticated caller; the store asks
 * the policy before touching anything.
 */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "broker/storage/store_above.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/sign.h"

/* The reply for a store call: its error, or *result (an empty object if
 * the handler set none). */
json_t *tsec__m_done(int rc, const struct tsec_error *err, json_t **result)
{
	if (rc)
		return tsec__err_json(err);
	if (!*result)
		*result = json_object();
	return NULL;
}

static json_t *lock_of(json_t *o, struct tsec_lock *lk);

/*
 * params.lock {name, token, fence}: every write method takes it, and is
 * then made only while that lock is held with that fence.  *fence is
 * NULL when the call gives none.
 */
static json_t *fence_of(const struct tsec__call *c, struct tsec_lock *lk,
			struct tsec_lock **fence)
{
	json_t *lj = json_object_get(c->params, "lock"), *f, *e;

	*fence = NULL;
	if (!lj)
		return NULL;
	f = json_object_get(lj, "fence");
	if ((e = lock_of(lj, lk)))
		return e;
	if (!json_is_integer(f) || json_integer_value(f) <= 0)
		return tsec__fail(TSEC_EPROTO, "params.lock.fence", "need a positive integer");
	lk->fence = (uint64_t)json_integer_value(f);
	*fence = lk;
	return NULL;
}

/* A value from o's "value" (text), "value_frame" (a frame of the call)
 * or "value_b64"; *buf is new when decoded (free it).  NULL, or the error
 * to answer. */
static json_t *value_of(struct tsec__call *c, const json_t *o, const char *where,
			const char **v, size_t *n, unsigned char **buf)
{
	json_t *b = json_object_get(o, "value_b64"), *e;

	*buf = NULL;
	*v = NULL;
	if ((e = tsec__value_in(c, o, "value", where, v, n)) || *v)
		return e;
	if (json_is_string(b)) {
		size_t cap = json_string_length(b);

		*n = 0;
		if (!(*buf = malloc(cap + 1)) ||
		    sodium_base642bin(*buf, cap, json_string_value(b), cap, NULL, n, NULL,
				      sodium_base64_VARIANT_ORIGINAL)) {
			free(*buf);
			*buf = NULL;
			return tsec__fail(TSEC_EPROTO, where, "value_b64 is not base64");
		}
		*v = (const char *)*buf;
		return NULL;
	}
	return tsec__fail(TSEC_EPROTO, where, "need \"value\", \"value_frame\" or \"value_b64\"");
}

json_t *tsec__m_store_put(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *key = tsec__param_str(c, "key"), *v;
	struct tsec_lock lk, *fence;
	struct tsec_error err;
	unsigned char *buf;
	size_t n;
	json_t *e;
	int rc;

	if ((e = fence_of(c, &lk, &fence)) ||
	    (e = value_of(c, c->params, "params.value", &v, &n, &buf)))
		return e;
	if ((e = tsec__frames_all_named(c))) {
		free(buf);
		return e;
	}
	if (fence) {
		struct tsec_put p = { key, v, n };

		rc = tsec_store_put_fenced(d->store, &c->p, fence, &p, 1, &err);
	} else {
		rc = tsec_store_put(d->store, &c->p, key, v, n, &err);
	}
	free(buf);
	return tsec__m_done(rc, &err, result);
}

/* {"puts": [{"key", "value" | "value_b64"}, ...], "lock"?}: all or nothing. */
json_t *tsec__m_store_put_many(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	json_t *a = json_object_get(c->params, "puts"), *e = NULL;
	struct tsec_lock lk, *fence;
	struct tsec_put *p = NULL;
	unsigned char **bufs = NULL;
	struct tsec_error err;
	size_t n = json_array_size(a), i;
	int rc = 0;

	if ((e = fence_of(c, &lk, &fence)))
		return e;
	if (!json_is_array(a) || n == 0 || n > TSEC_D_MAX_BATCH)
		return tsec__fail(TSEC_EPROTO, "params.puts", "need 1 to 256 objects {\"key\", "
				  "\"value\"}");
	if (!(p = calloc(n, sizeof(*p))) || !(bufs = calloc(n, sizeof(*bufs)))) {
		free(p);
		return tsec__fail(TSEC_ENOMEM, "", NULL);
	}
	for (i = 0; i < n && !e; i++) {
		const json_t *o = json_array_get(a, i);
		const char *v = NULL;

		p[i].key = json_string_value(json_object_get(o, "key"));
		if (!p[i].key)
			e = tsec__fail(TSEC_EPROTO, "params.puts", "each put needs a \"key\"");
		else
			e = value_of(c, o, "params.puts", &v, &p[i].len, &bufs[i]);
		p[i].value = v;
	}
	if (!e)
		e = tsec__frames_all_named(c);
	if (!e)
		rc = fence ? tsec_store_put_fenced(d->store, &c->p, fence, p, n, &err)
			   : tsec_store_put_many(d->store, &c->p, p, n, &err);
	for (i = 0; i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(p);
	return e ? e : tsec__m_done(rc, &err, result);
}

json_t *tsec__m_store_get(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_error err;
	char *v;
	size_t n;
	int rc;

	if (c->hit_only) {
		/* On the loop: a hit only, never a wait. */
		if ((rc = tsec__store_get_hit(d->store, &c->p, tsec__param_str(c, "key"), &v, &n,
					      &err)) > 0) {
			c->deferred = true;
			return NULL;
		}
	} else {
		rc = tsec_store_get(d->store, &c->p, tsec__param_str(c, "key"), &v, &n, &err);
	}
	if (!rc) {
		*result = json_object();
		if (!*result || tsec__value_out(c, *result, "value", &v, n)) {
			free(v);
			return tsec__fail(TSEC_ENOMEM, "", NULL);
		}
		free(v);
	}
	return tsec__m_done(rc, &err, result);
}

/*
 * {"key"}: {"exists": bool}, a file or a folder.  {"keys": [up to 8]}:
 * {"exists": [bool, ...]}, each a file, in one policy batch and one
 * backend read (tsec_store_exists_many): a renewal's three files in one
 * round trip.
 */
static json_t *exists_many(struct tsec__daemon *d, struct tsec__call *c, const json_t *ks,
			   json_t **result)
{
	const char *keys[TSEC__GET_MANY_MAX];
	int ex[TSEC__GET_MANY_MAX];
	struct tsec_error err;
	size_t n = json_array_size(ks);
	json_t *a;
	int rc;

	if (!json_is_array(ks) || n == 0 || n > TSEC__GET_MANY_MAX)
		return tsec__fail(TSEC_EINVAL, "keys", "keys: an array of 1-8 keys");
	for (size_t i = 0; i < n; i++)
		if (!(keys[i] = json_string_value(json_array_get(ks, i))))
			return tsec__fail(TSEC_EINVAL, "keys", "keys: strings only");
	if ((rc = tsec_store_exists_many(d->store, &c->p, keys, n, ex, &err)))
		return tsec__m_done(rc, &err, result);
	a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_boolean(ex[i]));
	*result = json_pack("{s:o}", "exists", a);
	return tsec__m_done(0, &err, result);
}

json_t *tsec__m_store_exists(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const json_t *ks = json_object_get(c->params, "keys");
	struct tsec_error err;
	int ex = 1, rc;

	if (ks) {
		if (c->hit_only) {           /* not the loop's: to a worker */
			c->deferred = true;
			return NULL;
		}
		return exists_many(d, c, ks, result);
	}
	if (c->hit_only) {
		if ((rc = tsec__store_exists_hit(d->store, &c->p, tsec__param_str(c, "key"),
						 &err)) > 0) {
			c->deferred = true;
			return NULL;
		}
	} else {
		rc = tsec_store_exists(d->store, &c->p, tsec__param_str(c, "key"), &ex, &err);
	}

	if (!rc)
		*result = json_pack("{s:b}", "exists", ex);
	return tsec__m_done(rc, &err, result);
}

json_t *tsec__m_store_delete(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *key = tsec__param_str(c, "key");
	int rec = json_is_true(json_object_get(c->params, "recursive"));
	struct tsec_lock lk, *fence;
	struct tsec_error err;
	json_t *e;
	int rc;

	if ((e = fence_of(c, &lk, &fence)))
		return e;
	rc = fence ? tsec_store_delete_fenced(d->store, &c->p, fence, key, rec, &err)
		   : tsec_store_delete(d->store, &c->p, key, rec, &err);
	return tsec__m_done(rc, &err, result);
}

json_t *tsec__m_store_list(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *prefix = tsec__param_str(c, "prefix");
	struct tsec_strlist l;
	struct tsec_error err;
	int rc = tsec_store_list(d->store, &c->p, prefix ? prefix : "",
				 json_is_true(json_object_get(c->params, "recursive")), &l, &err);

	if (!rc) {
		json_t *a = json_array();
		for (size_t i = 0; i < l.n; i++)
			json_array_append_new(a, json_string(l.v[i]));
		tsec_strlist_free(&l);
		*result = json_pack("{s:o}", "keys", a);
	}
	return tsec__m_done(rc, &err, result);
}

json_t *tsec__m_store_stat(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_stat st;
	struct tsec_error err;
	int rc = tsec_store_stat(d->store, &c->p, tsec__param_str(c, "key"), &st, &err);

	if (!rc)
		*result = json_pack("{s:I,s:I,s:b}", "size", (json_int_t)st.size,
				    "mtime_ns", (json_int_t)st.mtime_ns, "is_file", st.is_file);
	return tsec__m_done(rc, &err, result);
}

json_t *tsec__m_store_move(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *src = tsec__param_str(c, "src"), *dst = tsec__param_str(c, "dst");
	struct tsec_lock lk, *fence;
	struct tsec_error err;
	json_t *e;
	int rc;

	if ((e = fence_of(c, &lk, &fence)))
		return e;
	rc = fence ? tsec_store_move_fenced(d->store, &c->p, fence, src, dst, &err)
		   : tsec_store_move(d->store, &c->p, src, dst, &err);
	return tsec__m_done(rc, &err, result);
}

/* params.ttl_ms, a positive integer; 0 when absent or bad. */
static uint64_t ttl_of(const struct tsec__call *c)
{
	json_t *ttl = json_object_get(c->params, "ttl_ms");

	return json_is_integer(ttl) && json_integer_value(ttl) > 0
		? (uint64_t)json_integer_value(ttl) : 0;
}

/*
 * The caller's own deadline, sent with the call as the milliseconds it
 * will wait for the answer (params.deadline_ms; the client library
 * sends it with every lock.acquire): what is left of it for the broker,
 * after a margin for the answer's way back; -1 when it sent none.
 */
static int64_t caller_budget_ms(const struct tsec__call *c)
{
	json_t *v = json_object_get(c->params, "deadline_ms");
	int64_t ms, margin;

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	ms = json_integer_value(v) > INT64_MAX / 2 ? INT64_MAX / 2 : json_integer_value(v);
	margin = ms / 10 < TSEC_D_REPLY_MARGIN_MS ? ms / 10 : TSEC_D_REPLY_MARGIN_MS;
	return ms - margin;
}

/*
 * What is left of a lease, in milliseconds: what a holder on another
 * machine can use, timed from when it sent the call (expires_ms is on
 * this broker's wall clock, which may read hours apart from the
 * holder's).  The backend timed the lease from before its call, so this
 * never overstates it.
 */
static int64_t left_of(const struct tsec_lock *lk)
{
	int64_t left = lk->expires_ms - tsec__wall_ms();

	return left < 0 ? 0 : left;
}

/*
 * How long lock.acquire may wait, counted from when the call reached the
 * broker (issue 48: from when a worker was free, a call that waited for
 * one took a lock for a caller already gone): its timeout_ms (at most
 * TSEC_D_LOCK_WAIT_MAX_MS; none in a batch, where a wait would hold a
 * worker) within the caller's own budget, less what has passed since it
 * arrived.  -1 when the budget ran out before anything was tried.
 * *asked: whether the caller asked to wait at all (then a lock still held
 * when its time is up is "timed out", whatever the machine's speed made
 * of the time left, never "busy").
 */
static int64_t wait_left(const struct tsec__call *c, int64_t spent_ms, bool *asked)
{
	json_t *tmo = json_object_get(c->params, "timeout_ms");
	int64_t budget = caller_budget_ms(c), wait = 0;

	if (tmo)
		wait = json_integer_value(tmo) > TSEC_D_LOCK_WAIT_MAX_MS ? TSEC_D_LOCK_WAIT_MAX_MS
									 : json_integer_value(tmo);
	if (c->batched)
		wait = 0;
	*asked = wait > 0;
	/* Never past the caller's own deadline: a lock taken for a caller
	 * that has stopped listening is a lock nobody holds (issue 34). */
	if (budget >= 0 && wait > budget)
		wait = budget;
	if (budget >= 0 && spent_ms >= budget)
		return -1;
	return wait > spent_ms ? wait - spent_ms : 0;
}

/* Takes the lock as the call says: a parked wait's next attempt, a wait
 * that may park (rc TSEC_EBUSY, *parks set), a wait in this thread (one
 * attempt when its time is up: TSEC_ETIMEDOUT if held), or one try. */
static int take(struct tsec__daemon *d, struct tsec__call *c, uint64_t ttl, int64_t wait,
		bool asked, struct tsec_lock_wait *w, struct tsec_lock *lk, bool *parks,
		struct tsec_error *err)
{
	const char *name = tsec__param_str(c, "name");
	struct tsec__run *run = c->run;

	*parks = run && run->wait_out && (run->wait_in || wait > 0);
	if (run && run->wait_in) {
		/* A parked wait's next attempt: the name was checked when it
		 * began, the policy is asked again if it was reloaded since. */
		*w = *run->wait_in;
		return tsec_lock_wait_step(d->store, &c->p, w, lk, err);
	}
	if (*parks)
		return tsec_lock_wait_begin(d->store, &c->p, name, ttl, (uint64_t)wait, w, lk, err);
	if (wait > 0 || asked)
		return tsec_lock_acquire(d->store, &c->p, name, ttl, (uint64_t)wait, lk, err);
	return tsec_lock_try_acquire(d->store, &c->p, name, ttl, lk, err);
}

/* lock.acquire's parameters: NULL, or the error. */
static json_t *acquire_refused(struct tsec__call *c, uint64_t ttl)
{
	json_t *tmo = json_object_get(c->params, "timeout_ms"), *dl;

	if (!ttl)
		return tsec__fail(TSEC_EPROTO, "params.ttl_ms", "need a positive integer");
	if (tmo && (!json_is_integer(tmo) || json_integer_value(tmo) < 0))
		return tsec__fail(TSEC_EPROTO, "params.timeout_ms", "need a non-negative integer");
	if ((dl = json_object_get(c->params, "deadline_ms")) &&
	    (!json_is_integer(dl) || json_integer_value(dl) < 0))
		return tsec__fail(TSEC_EPROTO, "params.deadline_ms", "need a non-negative integer");
	return NULL;
}

/*
 * A lock taken for c, kept: counted among the caller's (let go at once
 * when it cannot be counted: never a lock the broker does not track),
 * named as this call's grant for a cancel that crosses it and for the
 * loop, which lets it go if the caller is gone when it answers; its
 * handle into *result.  NULL, or the error.
 */
static json_t *keep_grant(struct tsec__daemon *d, struct tsec__call *c,
			  const struct tsec_lock *lk, json_t **result)
{
	struct tsec__run *run = c->run;
	struct tsec_error err;
	char hex[33];
	int held;

	if (run) {
		size_t n;
		const char *id = tsec__call_id(c, &n);

		run->of.idlen = n <= sizeof(run->of.id) ? (uint8_t)n : 0;
		memcpy(run->of.id, id, run->of.idlen);
	}
	held = tsec__held_put(&d->held, lk, c->index, d->cfg.max_locks_per_caller,
			      run ? &run->of : NULL);
	if (held != TSEC__HELD_OK) {
		tsec_lock_release(d->store, &c->p, lk, &err);
		return tsec__fail(TSEC_EBUSY, "params.name", held == TSEC__HELD_QUOTA
				  ? "this caller holds as many live locks through the broker as "
				    "max_locks_per_caller allows"
				  : "the broker holds as many live locks as it can track");
	}
	if (run && run->grants.n < TSEC__GRANTS_MAX)
		run->grants.lk[run->grants.n++] = *lk;
	sodium_bin2hex(hex, sizeof(hex), lk->token, 16);
	*result = json_pack("{s:s,s:s,s:I,s:I,s:I}", "name", lk->name, "token", hex,
			    "expires_ms", (json_int_t)lk->expires_ms,
			    "expires_in_ms", (json_int_t)left_of(lk), "fence", (json_int_t)lk->fence);
	return NULL;
}

json_t *tsec__m_lock_acquire(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec__run *run = c->run;
	uint64_t ttl = ttl_of(c), now = tsec__mono_ns();
	uint64_t t0 = run && run->arrived_ns > 0 && (uint64_t)run->arrived_ns < now
		      ? (uint64_t)run->arrived_ns : now;
	int64_t budget = caller_budget_ms(c), wait;
	struct tsec_lock_wait w;
	struct tsec_lock lk;
	struct tsec_error err;
	bool parks, asked;
	json_t *refused;
	int rc;

	if ((refused = acquire_refused(c, ttl)))
		return refused;
	wait = wait_left(c, (int64_t)((now - t0) / 1000000), &asked);
	if (wait < 0 && !(run && run->wait_in))
		return tsec__fail(TSEC_ETIMEDOUT, "params.deadline_ms", "the caller's deadline "
				  "passed while the call waited for a worker: nothing was tried");
	/* Refused before the backend is asked: no lock taken, no fence spent. */
	if (tsec__held_of(&d->held, c->index, d->cfg.max_locks_per_caller) >=
	    d->cfg.max_locks_per_caller)
		return tsec__fail(TSEC_EBUSY, "params.name",
				  "this caller holds as many live locks through the broker as "
				  "max_locks_per_caller allows");
	memset(&lk, 0, sizeof(lk));
	memset(&w, 0, sizeof(w));
	rc = take(d, c, ttl, wait, asked, &w, &lk, &parks, &err);
	if (rc == TSEC_EBUSY && parks) {
		/* Held: the loop keeps the call and steps it after the pause;
		 * no worker waits. */
		*run->wait_out = w;
		run->parked = true;
		return NULL;
	}
	if (rc)
		return tsec__m_done(rc, &err, result);
	/*
	 * Taken, but after the caller's deadline (a broker paused, a backend
	 * slow to answer): the caller has stopped listening, so the lock is
	 * let go at once rather than held by nobody for its whole lease.
	 */
	if ((parks && (int64_t)tsec__mono_ns() > w.deadline_ns) ||
	    (budget >= 0 && (int64_t)(tsec__mono_ns() - t0) / 1000000 > budget)) {
		struct tsec_error e2;
		tsec_lock_release(d->store, &c->p, &lk, &e2);
		return tsec__fail(TSEC_ETIMEDOUT, "params.name", "the lock came free only after "
				  "this call's deadline: released at once, not held for a caller "
				  "that stopped waiting");
	}
	if ((refused = keep_grant(d, c, &lk, result)))
		return refused;
	return tsec__m_done(0, &err, result);      /* {} should the pack have failed */
}

/* The lock an object names: its "name" and "token". */
static json_t *lock_of(json_t *o, struct tsec_lock *lk)
{
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *tok = json_string_value(json_object_get(o, "token"));

	memset(lk, 0, sizeof(*lk));
	if (!name || !tok || tsec__hex_decode(tok, lk->token, 16) ||
	    strlen(name) > TSEC_LOCK_NAME_MAX)
		return tsec__fail(TSEC_EPROTO, "params",
				  "need \"name\" and a 32-digit hex \"token\"");
	snprintf(lk->name, sizeof(lk->name), "%s", name);
	return NULL;
}

json_t *tsec__m_lock_renew(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	uint64_t ttl = ttl_of(c);
	struct tsec_lock lk;
	struct tsec_error err;
	json_t *e;
	int rc;

	if (!ttl)
		return tsec__fail(TSEC_EPROTO, "params.ttl_ms", "need a positive integer");
	if ((e = lock_of(c->params, &lk)))
		return e;
	rc = tsec_lock_renew(d->store, &c->p, &lk, ttl, &err);
	if (!rc) {
		tsec__held_touch(&d->held, &lk, c->index);
		*result = json_pack("{s:I,s:I}", "expires_ms", (json_int_t)lk.expires_ms,
				    "expires_in_ms", (json_int_t)left_of(&lk));
	}
	return tsec__m_done(rc, &err, result);
}

json_t *tsec__m_lock_release(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_lock lk;
	struct tsec_error err;
	json_t *e;
	int rc;

	if ((e = lock_of(c->params, &lk)))
		return e;
	rc = tsec_lock_release(d->store, &c->p, &lk, &err);
	if (!rc)
		tsec__held_drop(&d->held, &lk);
	return tsec__m_done(rc, &err, result);
}

json_t *tsec__m_cancel(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	(void)d;
	(void)c;
	(void)result;
	return tsec__fail(TSEC_EPROTO, "method", "cancel is answered by the broker's loop only, "
			  "as a message of its own on the connection of the call it names");
}

void tsec__let_go(struct tsec__daemon *d, int caller, const struct tsec_lock *lk)
{
	struct tsec__call c;
	struct tsec_error err;

	if (caller < 0 || caller >= d->cfg.ncallers)
		return;
	/* As the caller, so the decision log has the release beside the
	 * grant (its call id null: nobody asked). */
	memset(&c, 0, sizeof(c));
	c.who = &d->cfg.callers[caller];
	c.index = caller;
	c.p.id = tsec_str_c(c.who->principal);
	c.p.roles = c.who->roles;
	c.p.nroles = c.who->nroles;
	c.p.call_ctx = &c;
	tsec__held_drop(&d->held, lk);
	atomic_fetch_add(&d->st.grants_undone, 1);
	if (tsec_lock_release(d->store, &c.p, lk, &err) && err.code != TSEC_ENOTOWNER &&
	    err.code != TSEC_ENOENT)
		tsec__say("could not let go lock %s, granted to %s after it had gone: %s", lk->name,
			  c.who->principal, err.msg);
	if (c.id_text != c.id_small)
		free(c.id_text);
}

/* {"issuer", "domain", "cert", "key", "meta"}, each file a string or a
 * frame ("cert_frame"...): the names and the three files (pointing into
 * the params or the frames), or the error for the reply. */
static json_t *cert_files_of(struct tsec__call *c, const char **issuer, const char **domain,
			     struct tsec_cert_files *f)
{
	static const char *const name[3] = { "cert", "key", "meta" };
	const char *v[3] = { NULL, NULL, NULL };
	size_t n[3] = { 0, 0, 0 };
	json_t *e;

	*issuer = tsec__param_str(c, "issuer");
	*domain = tsec__param_str(c, "domain");
	for (int i = 0; i < 3; i++)
		if ((e = tsec__value_in(c, c->params, name[i], "params", &v[i], &n[i])))
			return e;
	if (!*issuer || !*domain || !v[0] || !v[1] || !v[2])
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\", \"domain\", \"cert\", "
				  "\"key\" and \"meta\" (strings, or frames: \"cert_frame\"...)");
	if ((e = tsec__frames_all_named(c)))
		return e;
	f->cert = (char *)v[0];
	f->cert_len = n[0];
	f->key = (char *)v[1];
	f->key_len = n[1];
	f->meta = (char *)v[2];
	f->meta_len = n[2];
	return NULL;
}

/*
 * The three files as the result: frames when the caller asked for them
 * (the buffers become the reply's, the key wiped when ZeroMQ is done
 * with it), else JSON strings.  f is emptied either way, its key wiped.
 */
static json_t *cert_files_out(struct tsec__call *c, struct tsec_cert_files *f, json_t **result)
{
	json_t *r = NULL;

	if (c->frames_out && c->out) {
		if ((r = json_object()) && (tsec__value_out(c, r, "cert", &f->cert, f->cert_len) ||
					    tsec__value_out(c, r, "key", &f->key, f->key_len) ||
					    tsec__value_out(c, r, "meta", &f->meta, f->meta_len))) {
			json_decref(r);
			r = NULL;
		}
	} else {
		r = json_pack("{s:s%,s:s%,s:s%}", "cert", f->cert, f->cert_len, "key", f->key,
			      f->key_len, "meta", f->meta, f->meta_len);
	}
	if (f->key)
		sodium_memzero(f->key, f->key_len);
	tsec_cert_files_free(f);
	if (!r)
		return tsec__fail(c->frames_out ? TSEC_ENOMEM : TSEC_EPROTO, "",
				  c->frames_out ? NULL : "a stored file is not UTF-8 text");
	*result = r;
	return NULL;
}

/* {"issuer", "domain", "cert", "key", "meta"}: the three files as one group. */
json_t *tsec__m_store_save_cert(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *issuer, *domain;
	struct tsec_cert_files f;
	struct tsec_lock lk, *fence;
	struct tsec_error err;
	json_t *e;

	if ((e = fence_of(c, &lk, &fence)))
		return e;
	if ((e = cert_files_of(c, &issuer, &domain, &f)))
		return e;
	return tsec__m_done(tsec_store_save_cert_fenced(d->store, &c->p, fence, issuer, domain, &f, &err),
		    &err, result);
}

/* {"issuer", "domain"}: the three files, or TSEC_ENOENT / TSEC_EINCOMPLETE. */
json_t *tsec__m_store_load_cert(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *issuer = tsec__param_str(c, "issuer"), *domain = tsec__param_str(c, "domain");
	struct tsec_cert_files f;
	struct tsec_error err;
	int rc;

	if (!issuer || !domain)
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\" and \"domain\"");
	if ((rc = tsec_store_load_cert(d->store, &c->p, issuer, domain, &f, &err)))
		return tsec__err_json(&err);
	return cert_files_out(c, &f, result);
}

/* ---- remote.*: the remote certificate store ---- */

json_t *tsec__m_no_remote(void)
{
	return tsec__fail(TSEC_EINVAL, "method", "this broker has no remote certificate store "
			  "(\"remote\" in its configuration)");
}

/* {"issuer", "domain", "cert", "key", "meta", "lock"?}: published; the
 * answer says whether anything changed. */
json_t *tsec__m_remote_publish(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *issuer, *domain;
	enum tsec_remote_outcome oc = 0;
	struct tsec_cert_files f;
	struct tsec_lock lk, *fence;
	struct tsec_error err;
	json_t *e;
	int rc;

	if (!d->remote)
		return tsec__m_no_remote();
	if ((e = fence_of(c, &lk, &fence)))
		return e;
	if ((e = cert_files_of(c, &issuer, &domain, &f)))
		return e;
	rc = tsec_remote_publish(d->remote, &c->p, fence, issuer, domain, &f, &oc, &err);
	if (!rc)
		*result = json_pack("{s:s}", "outcome", oc == TSEC_REMOTE_UNCHANGED ? "unchanged"
									 : "published");
	return tsec__m_done(rc, &err, result);
}

/* {"issuer", "domain"}: the three files, each verified. */
json_t *tsec__m_remote_load(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	const char *issuer = tsec__param_str(c, "issuer"), *domain = tsec__param_str(c, "domain");
	struct tsec_cert_files f;
	struct tsec_error err;
	int rc;

	if (!d->remote)
		return tsec__m_no_remote();
	if (!issuer || !domain)
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\" and \"domain\"");
	if ((rc = tsec_remote_load(d->remote, &c->p, issuer, domain, &f, &err)))
		return tsec__err_json(&err);
	return cert_files_out(c, &f, result);
}

/* {"issuer", "domain"}: {"exists": bool}, from the reference alone. */
json_t *tsec__m_remote_exists(struct tsec__daemon *d, struct tsec__call *c, json_t **result)
{
	struct tsec_error err;
	int ex = 0, rc;

	if (!d->remote)
		return tsec__m_no_remote();
	if (!tsec__param_str(c, "issuer") || !tsec__param_str(c, "domain"))
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\" and \"domain\"");
	rc = tsec_remote_exists(d->remote, &c->p, tsec__param_str(c, "issuer"),
				tsec__param_str(c, "domain"), &ex, &err);
	if (!rc)
		*result = json_pack("{s:b}", "exists", ex);
	return tsec__m_done(rc, &err, result);
}

/* {"issuer", "domain", "name", "lock"?}: the key's reference archived. */
json_t *tsec__m_remote_archive_key(struct tsec__daemon *d, struct tsec__call *c,
				   json_t **result)
{
	struct tsec_lock lk, *fence;
	struct tsec_error err;
	json_t *e;

	if (!d->remote)
		return tsec__m_no_remote();
	if ((e = fence_of(c, &lk, &fence)))
		return e;
	if (!tsec__param_str(c, "issuer") || !tsec__param_str(c, "domain") ||
	    !tsec__param_str(c, "name"))
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\", \"domain\" and \"name\"");
	return tsec__m_done(tsec_remote_archive_key(d->remote, &c->p, fence, tsec__param_str(c, "issuer"),
					    tsec__param_str(c, "domain"),
					    tsec__param_str(c, "name"), &err),
		    &err, result);
}

/* {"issuer", "domain", "name"}: {"key": PEM}, for its publisher only. */
json_t *tsec__m_remote_load_archived(struct tsec__daemon *d, struct tsec__call *c,
				     json_t **result)
{
	struct tsec_error err;
	char *pem = NULL;
	size_t n = 0;
	int rc;

	if (!d->remote)
		return tsec__m_no_remote();
	if (!tsec__param_str(c, "issuer") || !tsec__param_str(c, "domain") ||
	    !tsec__param_str(c, "name"))
		return tsec__fail(TSEC_EPROTO, "params", "need \"issuer\", \"domain\" and \"name\"");
	rc = tsec_remote_load_archived(d->remote, &c->p, tsec__param_str(c, "issuer"),
				       tsec__param_str(c, "domain"), tsec__param_str(c, "name"),
				       &pem, &n, &err);
	if (rc)
		return tsec__err_json(&err);
	*result = json_pack("{s:s%}", "key", pem, n);
	sodium_memzero(pem, n);
	free(pem);
	return *result ? NULL : tsec__fail(TSEC_EPROTO, "", "the key is not UTF-8 text");
}

