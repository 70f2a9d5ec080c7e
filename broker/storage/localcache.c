/*
 * LocalCache: a read-through, write-through decorator over any backend,
 * as certmagic's Rust port keeps in front of remote storage.
 *
 * - A hit takes one shard's mutex for a hash lookup and a copy; no I/O is
 *   ever done under a shard mutex, so a hit never waits on the backend.
 * - A miss takes the key's gate, looks again, and only then reads the
 *   backend and fills the cache: concurrent misses of one key coalesce
 *   into one backend read.  Gates are a fixed table (gates.c), reused by
 *   every operation; nothing is allocated for them.
 * - A write holds the gates of its keys around the backend write and the
 *   cache update, so a concurrent miss can never put back an older value.
 * - A recursive delete holds every gate (a barrier): no fill can race it,
 *   and every cached key below the folder is dropped.  Keys arrive
 *   normalised, so aliases of one key ("a//b", "a/./b") are one entry.
 * - Memory is bounded: each shard keeps at most max_bytes / SHARDS bytes
 *   of keys and values and evicts its oldest entries first.
 *
 * Only values are cached (not absence, listings or stats).  Over file and
 * memory only what this process writes is seen: use it where the store
 * is the one writer of its keys.  Over etcd and redis the backend's feed
 * (fleet.h) drops what other writers change; a miss remembers what it
 * read only if no invalidation reached its shard meanwhile, so a value
 * read just before a peer's write is never kept after that write's
 * invalidation.
 *
 * A feed can fail silently (a watch pinned to a partitioned etcd member,
 * a half-open redis subscription), so over a feed a hit is served only
 * while the feed was proven live within bound_ms: the backend's
 * heartbeat, sent at time t and seen come back through the feed, proves
 * every invalidation of a write acknowledged before t has arrived, and
 * extends the bound to t + bound_ms.  Past it, every read goes to the
 * backend: a cached value is at most bound_ms older than the store.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/gates.h"
#include "broker/storage/localcache.h"
#include "common/clock.h"

#define SHARDS 16
#define BUCKETS 1024                 /* per shard; a power of two */

/* One cached value: a 40-byte header, the key, then the value, in one
 * allocation, so a hit touches as few cache lines as it can. */
struct centry {
	struct centry *next;         /* in its bucket */
	struct centry *older, *newer;/* in its shard's age list */
	uint32_t hash;
	uint32_t klen, len, cap;     /* cap: room for the value */
	char key[];                  /* klen + 1 bytes, then the value */
};

#define VAL_OF(e) ((e)->key + (e)->klen + 1)

struct shard {
	pthread_mutex_t mu;
	uint64_t gen;                /* bumped by each invalidation */
	uint64_t hits;
	struct centry *bucket[BUCKETS];
	struct centry *oldest, *newest;
	size_t bytes;
};

struct cache {
	struct tsec__backend base;
	struct tsec__backend *inner;
	size_t shard_max;
	struct tsec__gates gates;
	/* Hits are served while tsec__mono_ms() < live_until: INT64_MAX
	 * without a feed (the store is the one writer), else the last proof
	 * plus bound_ms (0: not proven since the feed started). */
	_Atomic int64_t live_until, proven_at;
	atomic_uint_fast64_t misses;     /* reads that went to the backend */
	uint32_t bound_ms;
	bool feed;
	pthread_mutex_t why_mu;
	char why[192];               /* the feed's last failure */
	struct shard shard[SHARDS];
};

static struct cache *c_of(struct tsec__backend *b)
{
	return (struct cache *)b;
}

static uint32_t hash_of(const char *k, size_t n)
{
	return (uint32_t)tsec__strhash(k, n);
}

static struct shard *shard_of(struct cache *c, uint32_t h)
{
	return &c->shard[h % SHARDS];
}

/* The entry for key in its shard (the shard's mutex held), or NULL. */
static struct centry *lookup(struct shard *sh, const char *key, size_t klen, uint32_t h)
{
	struct centry *e = sh->bucket[(h / SHARDS) & (BUCKETS - 1)];

	for (; e; e = e->next)
		if (e->hash == h && e->klen == klen && !memcmp(e->key, key, klen))
			return e;
	return NULL;
}

/* Unlinks and frees e (the shard's mutex held). */
static void unlink_entry(struct shard *sh, struct centry *e)
{
	struct centry **pp = &sh->bucket[(e->hash / SHARDS) & (BUCKETS - 1)];

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	if (e->older)
		e->older->newer = e->newer;
	else
		sh->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		sh->newest = e->older;
	sh->bytes -= e->klen + e->len;
	free(e);
}

/* Drops the entry of key, if any. */
static void forget(struct cache *c, const char *key)
{
	size_t klen = strlen(key);
	uint32_t h = hash_of(key, klen);
	struct shard *sh = shard_of(c, h);
	struct centry *e;

	pthread_mutex_lock(&sh->mu);
	if ((e = lookup(sh, key, klen, h)))
		unlink_entry(sh, e);
	pthread_mutex_unlock(&sh->mu);
}


/* The shard's invalidation count, for remember_if. */
static uint64_t gen_of(struct cache *c, const char *key)
{
	struct shard *sh = shard_of(c, hash_of(key, strlen(key)));
	uint64_t g;

	pthread_mutex_lock(&sh->mu);
	g = sh->gen;
	pthread_mutex_unlock(&sh->mu);
	return g;
}

/*
 * Caches a copy of key's value, evicting the shard's oldest to fit,
 * unless an invalidation reached the shard since *gen was read: then
 * whatever is cached for key is dropped instead.  A new value that fits
 * its entry's room is copied in place (a rewrite of a cached key
 * allocates nothing); otherwise the new entry is allocated before the
 * shard's mutex is taken.
 */
static void remember_if(struct cache *c, const char *key, const char *val, size_t len,
			const uint64_t *gen)
{
	size_t klen = strlen(key), cap = (len + 63) & ~(size_t)63;
	uint32_t h = hash_of(key, klen);
	struct shard *sh = shard_of(c, h);
	struct centry *e, *old, **b;

	if (klen + len > c->shard_max / 4 || len > UINT32_MAX / 2 || klen > TSEC_KEY_MAX)
		return forget(c, key);
	pthread_mutex_lock(&sh->mu);
	if (sh->gen != *gen) {
		if ((old = lookup(sh, key, klen, h)))
			unlink_entry(sh, old);
		pthread_mutex_unlock(&sh->mu);
		return;
	}
	if ((old = lookup(sh, key, klen, h)) && old->cap >= len && old->cap <= cap * 2) {
		sh->bytes = sh->bytes - old->len + len;
		memcpy(VAL_OF(old), val, len);
		old->len = (uint32_t)len;
		pthread_mutex_unlock(&sh->mu);
		return;
	}
	pthread_mutex_unlock(&sh->mu);
	if (!(e = malloc(sizeof(*e) + klen + 1 + cap)))
		return forget(c, key);
	e->hash = h;
	e->klen = (uint32_t)klen;
	e->len = (uint32_t)len;
	e->cap = (uint32_t)cap;
	memcpy(e->key, key, klen + 1);
		memcpy(VAL_OF(e), val, len);
	pthread_mutex_lock(&sh->mu);
	if ((old = lookup(sh, key, klen, h)))
		unlink_entry(sh, old);
	if (sh->gen != *gen) {
		pthread_mutex_unlock(&sh->mu);
		free(e);
		return;
	}
	while (sh->oldest && sh->bytes + klen + len > c->shard_max)
		unlink_entry(sh, sh->oldest);
	b = &sh->bucket[(h / SHARDS) & (BUCKETS - 1)];
	e->next = *b;
	*b = e;
	e->older = sh->newest;
	e->newer = NULL;
	if (sh->newest)
		sh->newest->newer = e;
	else
		sh->oldest = e;
	sh->newest = e;
	sh->bytes += klen + len;
	pthread_mutex_unlock(&sh->mu);
}

/* A hit: a new copy of the value in *out.  1 hit, 0 miss, -1 no memory. */
static int hit(struct cache *c, const char *key, size_t max, char **out, size_t *len)
{
	size_t klen = strlen(key);
	uint32_t h = hash_of(key, klen);
	struct shard *sh = shard_of(c, h);
	struct centry *e;
	int64_t until = atomic_load_explicit(&c->live_until, memory_order_acquire);
	int rc = 0;

	/* Over a feed not proven live lately, no hit (one vDSO clock read;
	 * none without a feed). */
	if (until != INT64_MAX && tsec__mono_ms() >= until)
		return 0;
	pthread_mutex_lock(&sh->mu);
	if ((e = lookup(sh, key, klen, h)) && e->len <= max) {
		sh->hits++;
		rc = TSEC_ENOMEM;
		if ((*out = malloc(e->len + 1))) {
			memcpy(*out, VAL_OF(e), e->len);
			(*out)[e->len] = '\0';
			*len = e->len;
			rc = 1;
		}
	}
	pthread_mutex_unlock(&sh->mu);
	return rc;
}

static int lc_get(struct tsec__backend *b, const struct tsec__skey *k, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	struct cache *c = c_of(b);
	struct tsec__gateset g;
	const char *key = k->text;
	int rc;

	*out = NULL;
	*len = 0;
	/* The store's own records are read from the backend every time. */
	if (tsec__key_uncached(key))
		return c->inner->ops->get(c->inner, k, max, out, len, err);
	if ((rc = hit(c, key, max, out, len)) != 0)
		return rc > 0 ? 0 : tsec__seterr(err, TSEC_ENOMEM, key, NULL);
	/* A miss: one reader per key goes to the backend, the rest wait here
	 * and find what it cached. */
	tsec__gates_lock(&c->gates, &key, 1, &g);
	if ((rc = hit(c, key, max, out, len)) == 0) {
		uint64_t gen = gen_of(c, key);

		atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
		rc = c->inner->ops->get(c->inner, k, max, out, len, err);
		if (rc == 0)
			remember_if(c, key, *out, *len, &gen);
	} else {
		rc = rc > 0 ? 0 : tsec__seterr(err, TSEC_ENOMEM, key, NULL);
	}
	tsec__gates_unlock(&c->gates, &g);
	return rc;
}

/*
 * Several keys as of one moment.  This process's groups hold the gates
 * of their keys around their write and the cache's update, so with the
 * gates held the cache is never half way through one: hits on every key
 * answer together.  Over a feed, another writer's group reaches the
 * cache key by key, so there (and on any miss) the read is the backend's
 * own get_many, which then fills the cache.
 */
static int lc_get_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
		       size_t max, char **out, size_t *len, struct tsec_error *err)
{
	struct cache *c = c_of(b);
	const char *keys[TSEC__GET_MANY_MAX];
	uint64_t gen[TSEC__GET_MANY_MAX];
	struct tsec__gateset g;
	bool reserved = false;
	size_t i;
	int rc;

	if ((rc = tsec__values_begin(out, len, n, err)))
		return rc;
	for (i = 0; i < n; i++) {
		keys[i] = k[i].text;
		reserved |= tsec__key_uncached(keys[i]);
	}
	if ((rc = tsec__gates_lock(&c->gates, keys, n, &g)))
		return tsec__seterr(err, rc, "", NULL);
	if (!c->feed && !reserved) {
		for (i = 0; i < n && (rc = hit(c, keys[i], max, &out[i], &len[i])) > 0; i++)
			;
		if (i == n) {
			rc = 0;
			goto out;
		}
		tsec__values_free(out, len, n);
		if (rc < 0) {
			rc = tsec__seterr(err, TSEC_ENOMEM, keys[i], NULL);
			goto out;
		}
	}
	for (i = 0; i < n; i++)
		gen[i] = gen_of(c, keys[i]);
	atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
	rc = c->inner->ops->get_many(c->inner, k, n, max, out, len, err);
	for (i = 0; rc == 0 && !reserved && i < n; i++)
		if (out[i])
			remember_if(c, keys[i], out[i], len[i], &gen[i]);
out:
	tsec__gates_unlock(&c->gates, &g);
	return rc;
}

static int lc_kind(struct tsec__backend *b, const struct tsec__skey *k, int *kind,
		   struct tsec_error *err)
{
	struct cache *c = c_of(b);
	size_t klen = k->tlen;
	uint32_t h = hash_of(k->text, klen);
	struct shard *sh = shard_of(c, h);
	int64_t until = atomic_load_explicit(&c->live_until, memory_order_acquire);
	bool cached = false;

	if (until == INT64_MAX || tsec__mono_ms() < until) {
		pthread_mutex_lock(&sh->mu);
		cached = lookup(sh, k->text, klen, h) != NULL;
		pthread_mutex_unlock(&sh->mu);
	}
	if (cached) {
		*kind = 1;
		return 0;
	}
	return c->inner->ops->kind(c->inner, k, kind, err);
}

static int lc_stat(struct tsec__backend *b, const struct tsec__skey *k, struct tsec_stat *st,
		   struct tsec_error *err)
{
	struct cache *c = c_of(b);

	return c->inner->ops->stat(c->inner, k, st, err);
}

static int lc_list(struct tsec__backend *b, const struct tsec__skey *k, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct cache *c = c_of(b);

	return c->inner->ops->list(c->inner, k, recursive, out, err);
}

/* Drops every cached key below folder prefix (every gate held). */
static void forget_below(struct cache *c, const char *prefix)
{
	size_t plen = strlen(prefix);

	for (size_t s = 0; s < SHARDS; s++) {
		struct shard *sh = &c->shard[s];
		struct centry *e, *next;
		pthread_mutex_lock(&sh->mu);
		for (e = sh->oldest; e; e = next) {
			next = e->newer;
			if (e->klen > plen && !memcmp(e->key, prefix, plen) && e->key[plen] == '/')
				unlink_entry(sh, e);
		}
		pthread_mutex_unlock(&sh->mu);
	}
}

static int lc_del(struct tsec__backend *b, const struct tsec__skey *k, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err)
{
	struct cache *c = c_of(b);
	struct tsec__gateset g;
	const char *key = k->text;
	int rc;

	tsec__gates_lock(&c->gates, &key, recursive ? (size_t)-1 : 1, &g);
	rc = c->inner->ops->del(c->inner, k, recursive, f, err);
	/* Whatever the backend answered, nothing stale may stay. */
	forget(c, key);
	if (recursive)
		forget_below(c, key);
	tsec__gates_unlock(&c->gates, &g);
	return rc;
}

static int lc_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err)
{
	struct cache *c = c_of(b);
	const char *keys[2] = { src->text, dst->text };
	struct tsec__gateset g;
	int rc;

	tsec__gates_lock(&c->gates, keys, 2, &g);
	rc = c->inner->ops->move(c->inner, src, dst, f, err);
	forget(c, src->text);
	forget(c, dst->text);
	tsec__gates_unlock(&c->gates, &g);
	return rc;
}

/*
 * A write keeps its values only where no invalidation reached the key's
 * shard while the backend wrote: a peer's later write to the key may
 * have been applied and announced before our answer came back, and our
 * value, kept after that, would shadow the peer's until the next change.
 */
static int lc_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *gd,
		       struct tsec_error *err)
{
	struct cache *c = c_of(b);
	const char *few[8] = { NULL }, **keys = n <= 8 ? few : malloc(n * sizeof(*keys));
	uint64_t fewgen[8], *gen = n <= 8 ? fewgen : malloc(n * sizeof(*gen));
	struct tsec__gateset g;
	int rc;

	if (!keys || !gen) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		keys[i] = p[i].sk->text;
	if ((rc = tsec__gates_lock(&c->gates, keys, n, &g))) {
		rc = tsec__seterr(err, rc, "", NULL);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		gen[i] = gen_of(c, keys[i]);
	/* A guard's key is one of the group's (the store writes the record
	 * it guards), so its gate is held with theirs. */
	rc = c->inner->ops->put_many(c->inner, p, n, f, gd, err);
	for (size_t i = 0; i < n; i++) {
		if (rc == 0 && !tsec__key_uncached(keys[i]))
			remember_if(c, keys[i], p[i].value, p[i].len, &gen[i]);
		else
			forget(c, keys[i]);
	}
	tsec__gates_unlock(&c->gates, &g);
out:
	if (keys != few)
		free(keys);
	if (gen != fewgen)
		free(gen);
	return rc;
}

static int lc_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		       const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct cache *c = c_of(b);

	return c->inner->ops->lock_try(c->inner, name, ttl_ms, waiter, out, err);
}

static void lc_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16])
{
	struct cache *c = c_of(b);

	if (c->inner->ops->lock_unwait)
		c->inner->ops->lock_unwait(c->inner, name, waiter);
}

static int lc_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			 uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	struct cache *c = c_of(b);

	return c->inner->ops->lock_renew(c->inner, name, token, ttl_ms, expires_ms, err);
}

static int lc_lock_release(struct tsec__backend *b, const char *name,
			   const uint8_t token[16], struct tsec_error *err)
{
	struct cache *c = c_of(b);

	return c->inner->ops->lock_release(c->inner, name, token, err);
}

static void lc_close(struct tsec__backend *b)
{
	struct cache *c = c_of(b);

	if (!c)
		return;
	/* First the backend: it stops its feed, which calls into the cache. */
	c->inner->ops->close(c->inner);
	for (size_t s = 0; s < SHARDS; s++) {
		while (c->shard[s].oldest)
			unlink_entry(&c->shard[s], c->shard[s].oldest);
		pthread_mutex_destroy(&c->shard[s].mu);
	}
	pthread_mutex_destroy(&c->why_mu);
	tsec__gates_destroy(&c->gates);
	free(c);
}

int tsec__localcache_peek(struct tsec__backend *b, const struct tsec__skey *k, size_t max,
			  char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	/* The store's own records are never answered from the cache. */
	if (tsec__key_uncached(k->text))
		return 0;
	return hit(c_of(b), k->text, max, out, len);
}

void tsec__localcache_invalidate(void *cache, const char *key)
{
	struct cache *c = cache;

	for (size_t s = 0; s < SHARDS; s++) {
		struct shard *sh = &c->shard[s];
		struct centry *e;
		uint32_t h = 0;

		if (key) {
			h = hash_of(key, strlen(key));
			sh = shard_of(c, h);
		}
		pthread_mutex_lock(&sh->mu);
		sh->gen++;
		if (!key)
			while (sh->oldest)
				unlink_entry(sh, sh->oldest);
		else if ((e = lookup(sh, key, strlen(key), h)))
			unlink_entry(sh, e);
		pthread_mutex_unlock(&sh->mu);
		if (key)
			break;
	}
}

static void watched(struct cache *c, uint32_t bound_ms)
{
	c->feed = true;
	c->bound_ms = bound_ms ? bound_ms : TSEC__FEED_BOUND_MS;
	atomic_store(&c->live_until, 0);
}

const struct tsec__backend *tsec__localcache_inner(const struct tsec__backend *b)
{
	return ((const struct cache *)b)->inner;
}

static void alive(void *cache, int64_t sent_ms)
{
	struct cache *c = cache;
	int64_t until = sent_ms + c->bound_ms, cur = atomic_load(&c->live_until);

	/* Proofs may arrive out of order: the bound only moves forward. */
	while (cur < until && !atomic_compare_exchange_weak(&c->live_until, &cur, until))
		;
	atomic_store(&c->proven_at, sent_ms);
	pthread_mutex_lock(&c->why_mu);
	c->why[0] = '\0';
	pthread_mutex_unlock(&c->why_mu);
}

static void dead(void *cache, const char *why)
{
	struct cache *c = cache;

	atomic_store(&c->live_until, 0);
	tsec__localcache_invalidate(cache, NULL);
	if (why) {
		pthread_mutex_lock(&c->why_mu);
		snprintf(c->why, sizeof(c->why), "%s", why);
		pthread_mutex_unlock(&c->why_mu);
	}
}

void tsec__localcache_sink(struct tsec__backend *cache, bool watch, uint32_t bound_ms,
			   struct tsec__feed_sink *out)
{
	struct cache *c = c_of(cache);

	*out = (struct tsec__feed_sink){ .changed = tsec__localcache_invalidate, .ctx = c };
	if (watch) {
		watched(c, bound_ms);
		out->alive = alive;
		out->dead = dead;
		out->bound_ms = c->bound_ms;
	}
}

void tsec__localcache_info(struct tsec__backend *b, struct tsec_store_info *info)
{
	struct cache *c = c_of(b);
	int64_t now = tsec__mono_ms(), at = atomic_load(&c->proven_at);

	info->cached = true;
	info->feed = c->feed;
	info->bound_ms = c->bound_ms;
	info->live = !c->feed || now < atomic_load(&c->live_until);
	info->misses = atomic_load(&c->misses);
	info->proven_ms_ago = c->feed && at ? now - at : -1;
	for (size_t s = 0; s < SHARDS; s++) {
		pthread_mutex_lock(&c->shard[s].mu);
		info->hits += c->shard[s].hits;
		info->cached_bytes += c->shard[s].bytes;
		pthread_mutex_unlock(&c->shard[s].mu);
	}
	pthread_mutex_lock(&c->why_mu);
	snprintf(info->why, sizeof(info->why), "%s", c->why);
	pthread_mutex_unlock(&c->why_mu);
}

static const struct tsec__backend_ops cache_ops = {
	.name = "localcache",
	.close = lc_close,
	.get = lc_get,
	.get_many = lc_get_many,
	.kind = lc_kind,
	.stat = lc_stat,
	.list = lc_list,
	.del = lc_del,
	.move = lc_move,
	.put_many = lc_put_many,
	.lock_try = lc_lock_try,
	.lock_unwait = lc_lock_unwait,
	.lock_renew = lc_lock_renew,
	.lock_release = lc_lock_release,
};

int tsec__localcache_open(struct tsec__backend **out, struct tsec__backend *inner,
			  size_t max_bytes, struct tsec_error *err)
{
	struct cache *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	c->base.ops = &cache_ops;
	c->inner = inner;
	c->shard_max = max_bytes / SHARDS ? max_bytes / SHARDS : 1;
	tsec__gates_init(&c->gates);
	atomic_init(&c->live_until, INT64_MAX);
	atomic_init(&c->proven_at, 0);
	pthread_mutex_init(&c->why_mu, NULL);
	for (size_t s = 0; s < SHARDS; s++)
		pthread_mutex_init(&c->shard[s].mu, NULL);
	*out = &c->base;
	return 0;
}
