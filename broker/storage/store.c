/*
 * The gated store: every call validates its keys by the key rules, asks
 * the policy once through the bus, and only then reaches the backend
 * (backend.h).  A deny changes nothing and touches no backend.  Writes
 * take the per-key gates of their keys in one canonical order, so groups
 * that share a key serialise and disjoint ones run in parallel.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/storage/fleet.h"
#include "common/opts.h"
#include "common/wire.h"
#include "broker/storage/gates.h"
#include "broker/storage/localcache.h"
#include "broker/storage/store_private.h"

static void say_nearest(struct tsec_store *s, const struct tsec_request *r,
			struct tsec_error *err);

int tsec__store_check(struct tsec_store *s, const struct tsec_principal *who,
		      struct tsec_request *reqs, size_t n, struct tsec_error *err)
{
	/* A certificate's three files and a move fit on the stack, not
	 * cleared: only the fields read below start as a denial, should a
	 * module answer 0 without writing them. */
	struct tsec_decision small[TSEC__SMALL_GROUP], *d = small;
	struct tsec_endpoint *ep;
	uint64_t t0;
	int rc;

	if (!who || !who->id.ptr)
		return tsec__seterr(err, TSEC_EINVAL, "principal", "no principal");
	if (n > TSEC__SMALL_GROUP && !(d = malloc(n * sizeof(*d))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	for (size_t i = 0; i < n; i++) {
		d[i].allow = 0;
		d[i].status = TSEC_STATUS_DEFAULT;
		d[i].nrules = 0;
		d[i].flags = 0;
		d[i].field[0] = d[i].detail[0] = '\0';
		reqs[i].principal = who->id;
		reqs[i].roles = who->roles;
		reqs[i].nroles = who->nroles;
	}
	t0 = s->observer ? tsec__mono_ns() : 0;
	ep = atomic_load_explicit(&s->ep, memory_order_acquire);
	if (!ep && (ep = tsec_bus_endpoint(s->bus, s->endpoint)))
		atomic_store_explicit(&s->ep, ep, memory_order_release);
	/* Without one, by name: its error says there is no such endpoint. */
	rc = ep ? tsec_endpoint_check(ep, reqs, n, d, err)
		: tsec_bus_check(s->bus, s->endpoint, reqs, n, d, err);
	if (rc == 0 && s->observer)
		s->observer(s->observer_ctx, who->call_ctx, reqs, d, n, tsec__mono_ns() - t0);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char rules[TSEC_DECISION_RULES * (TSEC_ID_MAX + 2)];
		size_t o = 0;

		if (d[i].allow)
			continue;
		rules[0] = '\0';
		/* Bounded by the arrays, not by a NUL the module may not
		 * have written: four ids of 64 and three ", " fit. */
		for (unsigned j = 0; j < d[i].nrules && j < TSEC_DECISION_RULES; j++)
			o += (size_t)snprintf(rules + o, sizeof(rules) - o, "%s%.*s",
					      j ? ", " : "",
					      (int)strnlen(d[i].rules[j], TSEC_ID_MAX),
					      d[i].rules[j]);
		/* e.g. "storage.list certificates/a: forbidden by floor (keys)" */
		rc = tsec__seterr(err, TSEC_EDENIED, "",
				  "%.*s %.*s: %s%s%s%s%s%.*s", (int)reqs[i].action.len,
				  reqs[i].action.ptr, (int)reqs[i].resource.len,
				  reqs[i].resource.ptr, tsec_status_reason(d[i].status),
				  d[i].nrules ? " (" : "", rules, d[i].nrules ? ")" : "",
				  d[i].detail[0] ? ": " : "",
				  (int)strnlen(d[i].detail, TSEC_DETAIL_MAX), d[i].detail);
		snprintf(err->where, sizeof(err->where), "%.*s",
			 (int)reqs[i].resource.len, reqs[i].resource.ptr);
		/* A condition that failed to evaluate names its rule already:
		 * "no rule matches" would contradict it (issue 51, item 14). */
		if (d[i].status == TSEC_STATUS_DEFAULT && !(d[i].flags & TSEC_DECISION_COND_ERROR))
			say_nearest(s, &reqs[i], err);
		break;
	}
	if (d != small)
		free(d);
	return rc;
}

/*
 * A default deny says why not, as `tsec check` does: the first rule that
 * matched the request but did not apply, and the condition it failed
 * (the module's explain).  On the deny path only: the report and the
 * explanation are tens of kilobytes, allocated here, never for an allow.
 */
static void say_nearest(struct tsec_store *s, const struct tsec_request *r,
			struct tsec_error *err)
{
	struct tsec_report *rep = malloc(sizeof(*rep));
	struct tsec_explain *ex = malloc(sizeof(*ex));
	struct tsec_error e2;
	size_t n = strlen(err->msg);

	if (rep && ex && !tsec_bus_explain(s->bus, s->endpoint, r, rep, ex, &e2) &&
	    ex->explained) {
		tsec__explain_seal(ex);
		if (ex->nnot_applied)
			snprintf(err->msg + n, sizeof(err->msg) - n, "; nearest rule '%s'%s: %s",
				 ex->not_applied[0].rule,
				 ex->not_applied[0].dest ? " (at the destination)" : "",
				 ex->not_applied[0].why);
		else
			snprintf(err->msg + n, sizeof(err->msg) - n, "; no rule matches this "
				 "principal, action and resource together");
	}
	free(rep);
	free(ex);
}

void tsec__req_for(struct tsec_request *r, const char *action, const struct tsec__skey *sk)
{
	memset(r, 0, sizeof(*r));
	r->action = tsec_str_c(action);
	r->resource.ptr = sk->text;
	r->resource.len = sk->tlen;
}

/* The backend o names, when o's options are ones it takes; NULL with err
 * set (an unknown backend listing the known, a misspelt option of its
 * own with the nearest, a retired or a networked option on a local one). */
static const struct tsec__backend_kind *backend_for(const struct tsec_store_opts *o,
						    struct tsec_error *err)
{
	const char *kind = o->backend ? o->backend : "file";
	const struct tsec__backend_kind *bk = tsec__backend_find(kind);
	char who[48];

	if (!bk || bk->version != TSEC__BACKEND_VERSION) {
		const char *names[16];
		char list[128] = "";
		size_t n = tsec__backend_names(0, names, 16);

		for (size_t i = 0; i < n; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 i ? ", " : "", names[i]);
		tsec__seterr(err, TSEC_EINVAL, "backend", "unknown backend '%s' (%s)", kind, list);
		return NULL;
	}
	snprintf(who, sizeof(who), "the %s backend", kind);
	if (tsec__params_check(o->params, bk->params, who, err))
		return NULL;
	if (o->clock_skew_ms) {
		tsec__seterr(err, TSEC_EINVAL, "clock_skew_ms", "clock_skew_ms is retired: an etcd "
			     "lock ends by etcd's lease of the lock itself, and no broker's clock "
			     "decides (leave it 0)");
		return NULL;
	}
	if (!(bk->caps & TSEC__CAP_NETWORK) &&
	    (o->endpoints || o->prefix || o->key_file || o->tls_ca || o->tls_cert ||
	     o->tls_key || o->username || o->password_file || o->request_max ||
	     o->timeout_ms)) {
		tsec__seterr(err, TSEC_EINVAL, "backend", "the %s backend takes no endpoints, "
			     "prefix, key_file, TLS or authentication", kind);
		return NULL;
	}
	return bk;
}

/*
 * Opens bk with o, the LocalCache in front when o asks for one, and the
 * feed hub over them: *be the top of the stack (the cache, or the
 * backend), *cached the cache or NULL.  0, or the error with nothing left
 * open.
 */
static int open_stack(const struct tsec__backend_kind *bk, const struct tsec_store_opts *o,
		      struct tsec__backend **be, struct tsec__backend **cached,
		      struct tsec__hub **hub, struct tsec_error *err)
{
	struct tsec__feed_sink sink;
	int rc;

	*cached = NULL;
	if ((rc = bk->open(be, o, err)))
		return rc;
	if (!o->cache_bytes) {
		if ((rc = tsec__hub_open(hub, *be, bk, NULL, err)))
			(*be)->ops->close(*be);
		return rc;
	}
	if ((rc = tsec__localcache_open(cached, *be, o->cache_bytes, err))) {
		(*be)->ops->close(*be);
		return rc;
	}
	/* Over a shared backend, other writers' changes drop cached values,
	 * and hits wait for the feed's first proof of life; over files, only
	 * what the backend itself changes (a dead writer's group it rolls
	 * forward), with nothing to prove.  The hub hands the feed on to the
	 * cache and to watchers. */
	tsec__localcache_sink(*cached, bk->caps & TSEC__CAP_SHARED, o->cache_live_ms, &sink);
	if ((rc = tsec__hub_open(hub, *be, bk, &sink, err))) {
		(*cached)->ops->close(*cached);
		*cached = NULL;
		return rc;
	}
	*be = *cached;
	return 0;
}

int tsec_store_open_opts(struct tsec_store **out, const struct tsec_store_opts *o,
			 struct tsec_bus *bus, const char *endpoint, struct tsec_error *err)
{
	struct tsec_store_opts mine;
	const struct tsec__backend_kind *bk;
	struct tsec__backend *be = NULL, *cached = NULL;
	struct tsec__hub *hub = NULL;
	struct tsec_store *s;
	int rc;

	if (out)
		*out = NULL;
	if (!out || !o || !bus)
		return tsec__seterr(err, TSEC_EINVAL, "", "store needs options and a bus");
	/* The caller's struct by its size: what its header had (types.h). */
	if ((rc = tsec__opts_take(&mine, sizeof(mine), TSEC_STORE_OPTS_MIN_SIZE, o,
				  "store options", err)))
		return rc;
	if (endpoint && strlen(endpoint) >= TSEC_ENDPOINT_NAME_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "", "endpoint name too long");
	if (sodium_init() < 0)
		return tsec__seterr(err, TSEC_EIO, "", "libsodium failed to initialise");
	if (!(bk = backend_for(&mine, err)))
		return err->code;
	if ((rc = open_stack(bk, &mine, &be, &cached, &hub, err)))
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->gates = malloc(sizeof(*s->gates)))) {
		free(s);
		be->ops->close(be);
		tsec__hub_free(hub);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	s->hub = hub;
	tsec__gates_init(s->gates);
	s->be = be;
	s->cache = cached;
	s->bus = bus;
	snprintf(s->endpoint, sizeof(s->endpoint), "%s", endpoint ? endpoint : "policy");
	s->value_max = TSEC_STORE_VALUE_MAX;
	*out = s;
	return 0;
}

int tsec_store_open(struct tsec_store **out, const char *root, struct tsec_bus *bus,
		    const char *endpoint, struct tsec_error *err)
{
	struct tsec_store_opts o = { .backend = "file", .root = root };

	if (out)
		*out = NULL;
	if (!root || !*root || !bus)
		return tsec__seterr(err, TSEC_EINVAL, "", "store needs a root and a bus");
	return tsec_store_open_opts(out, &o, bus, endpoint, err);
}

void tsec_store_set_observer(struct tsec_store *s, tsec_store_observer_fn fn, void *ctx)
{
	if (!s)
		return;
	s->observer = fn;
	s->observer_ctx = ctx;
}

void tsec_store_info(struct tsec_store *s, struct tsec_store_info *info)
{
	const struct tsec__backend *inner;

	memset(info, 0, sizeof(*info));
	info->proven_ms_ago = -1;
	if (!s)
		return;
	inner = s->cache ? tsec__localcache_inner(s->cache) : s->be;
	snprintf(info->backend, sizeof(info->backend), "%s", inner->ops->name);
	if (inner->ops->note)
		inner->ops->note((struct tsec__backend *)inner, info->note, sizeof(info->note));
	if (s->cache)
		tsec__localcache_info(s->cache, info);
}

void tsec_store_close(struct tsec_store **ps)
{
	struct tsec_store *s;

	if (!ps || !*ps)
		return;
	s = *ps;
	/* The backend stops its feed before its close returns: then the
	 * hub it delivered to can go. */
	s->be->ops->close(s->be);
	tsec__hub_free(s->hub);
	tsec__gates_destroy(s->gates);
	free(s->gates);
	free(s);
	*ps = NULL;
}

/* Parses key and asks the policy for action on it (ctx: extra context). */
static int gate1(struct tsec_store *s, const struct tsec_principal *who, const char *key,
		 bool root_ok, const char *action, int recursive, struct tsec__skey *sk,
		 struct tsec_error *err)
{
	struct tsec_request r;
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");
	if ((rc = tsec__skey_parse(key, root_ok, sk, err)))
		return rc;
	tsec__req_for(&r, action, sk);
	if (recursive) {
		r.ctx.has |= TSEC_CTX_RECURSIVE;
		r.ctx.recursive = 1;
	}
	return tsec__store_check(s, who, &r, 1, err);
}

int tsec_store_put(struct tsec_store *s, const struct tsec_principal *who, const char *key,
		   const void *value, size_t len, struct tsec_error *err)
{
	struct tsec_put p = { key, value, len };

	return tsec_store_put_many(s, who, &p, 1, err);
}

int tsec_store_get(struct tsec_store *s, const struct tsec_principal *who, const char *key,
		   char **out, size_t *len, struct tsec_error *err)
{
	struct tsec__skey sk;
	int rc;

	if (out)
		*out = NULL;
	if (len)
		*len = 0;
	if (!out || !len)
		return tsec__seterr(err, TSEC_EINVAL, "", "nowhere to put the value");
	if ((rc = gate1(s, who, key, false, "storage.load", 0, &sk, err)))
		return rc;
	return s->be->ops->get(s->be, &sk, s->value_max, out, len, err);
}

/* The LocalCache's answer for a read, the policy asked as for action. */
static int read_hit(struct tsec_store *s, const struct tsec_principal *who, const char *key,
		    const char *action, char **out, size_t *len, struct tsec_error *err)
{
	struct tsec__skey sk;
	struct tsec_request r;
	int rc;

	*out = NULL;
	*len = 0;
	if (!s || !s->cache || tsec__skey_parse(key, false, &sk, err))
		return 1;       /* a bad key is the whole call's to refuse */
	/* Looked at before the policy is asked: a value is only ever
	 * answered after it allowed the read, and a miss asks nothing, so
	 * the read the worker makes next is asked (and logged) once. */
	if ((rc = tsec__localcache_peek(s->cache, &sk, s->value_max, out, len)) <= 0)
		return rc < 0 ? tsec__seterr(err, TSEC_ENOMEM, sk.text, NULL) : 1;
	tsec__req_for(&r, action, &sk);
	if ((rc = tsec__store_check(s, who, &r, 1, err))) {
		free(*out);
		*out = NULL;
		*len = 0;
	}
	return rc;
}

int tsec__store_get_hit(struct tsec_store *s, const struct tsec_principal *who, const char *key,
			char **out, size_t *len, struct tsec_error *err)
{
	return read_hit(s, who, key, "storage.load", out, len, err);
}

int tsec__store_exists_hit(struct tsec_store *s, const struct tsec_principal *who,
			   const char *key, struct tsec_error *err)
{
	char *v;
	size_t n;
	int rc = read_hit(s, who, key, "storage.exists", &v, &n, err);

	free(v);
	return rc;
}

int tsec_store_exists(struct tsec_store *s, const struct tsec_principal *who,
		      const char *key, int *exists, struct tsec_error *err)
{
	struct tsec__skey sk;
	int rc, kind = 0;

	*exists = 0;
	if ((rc = gate1(s, who, key, false, "storage.exists", 0, &sk, err)) ||
	    (rc = s->be->ops->kind(s->be, &sk, &kind, err)))
		return rc;
	*exists = kind != 0;
	return 0;
}

int tsec_store_exists_many(struct tsec_store *s, const struct tsec_principal *who,
			   const char *const *keys, size_t n, int *exists,
			   struct tsec_error *err)
{
	/* A certificate's few files on the stack; a longer list allocated. */
	struct tsec__skey sk_small[TSEC__SMALL_GROUP], *sk = sk_small;
	struct tsec_request r_small[TSEC__SMALL_GROUP], *r = r_small;
	int rc = 0;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");
	if (n == 0)
		return 0;
	if (n > TSEC__SMALL_GROUP) {
		sk = n <= SIZE_MAX / sizeof(*sk) ? malloc(n * sizeof(*sk)) : NULL;
		r = n <= SIZE_MAX / sizeof(*r) ? malloc(n * sizeof(*r)) : NULL;
	}
	if (!sk || !r) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		exists[i] = 0;
		if ((rc = tsec__skey_parse(keys[i], false, &sk[i], err)))
			goto out;
		tsec__req_for(&r[i], "storage.exists", &sk[i]);
	}
	if ((rc = tsec__store_check(s, who, r, n, err)))
		goto out;
	if (s->be->ops->files_many && n <= TSEC__GET_MANY_MAX) {
		rc = s->be->ops->files_many(s->be, sk, n, exists, err);
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		int kind = 0;
		rc = s->be->ops->kind(s->be, &sk[i], &kind, err);
		exists[i] = kind == 1;
	}
out:
	if (sk != sk_small)
		free(sk);
	if (r != r_small)
		free(r);
	return rc;
}

static int delete_as(struct tsec_store *s, const struct tsec_principal *who, const char *key,
		     int recursive, const struct tsec__fence *f, struct tsec_error *err)
{
	struct tsec__gateset g;
	struct tsec__skey sk;
	const char *k = sk.text;
	int rc;

	if ((rc = gate1(s, who, key, false, "storage.delete", recursive, &sk, err)))
		return rc;
	/* A folder's delete is a barrier: every gate, so no write below it
	 * runs meanwhile. */
	if ((rc = tsec__gates_lock(s->gates, &k, recursive ? (size_t)-1 : 1, &g)))
		return tsec__seterr(err, rc, "", NULL);
	rc = s->be->ops->del(s->be, &sk, recursive, f, err);
	tsec__gates_unlock(s->gates, &g);
	return rc;
}

int tsec_store_delete(struct tsec_store *s, const struct tsec_principal *who,
		      const char *key, int recursive, struct tsec_error *err)
{
	return delete_as(s, who, key, recursive, NULL, err);
}

int tsec_store_delete_fenced(struct tsec_store *s, const struct tsec_principal *who,
			     const struct tsec_lock *lk, const char *key, int recursive,
			     struct tsec_error *err)
{
	struct tsec__fence f;
	int rc;

	if ((rc = tsec__fence_of(lk, &f, err)))
		return rc;
	return delete_as(s, who, key, recursive, &f, err);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The root's listing leaves out the store's own records. */
static void drop_reserved(struct tsec_strlist *l)
{
	size_t o = 0;

	for (size_t i = 0; i < l->n; i++) {
		if (tsec__key_reserved(l->v[i]))
			free(l->v[i]);
		else
			l->v[o++] = l->v[i];
	}
	l->n = o;
}

int tsec_store_list(struct tsec_store *s, const struct tsec_principal *who,
		    const char *prefix, int recursive, struct tsec_strlist *out,
		    struct tsec_error *err)
{
	struct tsec__skey sk;
	int rc;

	out->v = NULL;
	out->n = 0;
	if ((rc = gate1(s, who, prefix, true, "storage.list", recursive, &sk, err)) ||
	    (rc = s->be->ops->list(s->be, &sk, recursive, out, err)))
		return rc;
	if (sk.n == 0)
		drop_reserved(out);
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(*out->v), cmp_str);
	return 0;
}

int tsec_store_stat(struct tsec_store *s, const struct tsec_principal *who,
		    const char *key, struct tsec_stat *st, struct tsec_error *err)
{
	struct tsec__skey sk;
	int rc;

	memset(st, 0, sizeof(*st));
	if ((rc = gate1(s, who, key, false, "storage.stat", 0, &sk, err)))
		return rc;
	return s->be->ops->stat(s->be, &sk, st, err);
}
