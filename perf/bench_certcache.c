/*
 * bench_certcache: lookups in the certificate cache, and the key gate a
 * cache fill takes.
 *
 *   build/release/bench_certcache [LOOKUPS_PER_THREAD]   (default 100,000)
 *   BENCH_SAMPLES=N      samples per case (default 9)
 *   BENCH_ONLY=GROUP     one group: "cache" (every lookup case) or
 *                        "guarded" (the gate cases); the storage side of
 *                        a fill is bench_store's
 *
 * CSV: case,sample,iterations,elapsed_ns,ns_per_op.  Each case is warmed
 * once, then timed BENCH_SAMPLES times; filling the cache and starting
 * threads are outside the timed part.
 *
 * One certificate with SANs example.com and *.example.com:
 *   lookup_exact, lookup_wildcard (api.example.com), lookup_miss,
 *   lookup_all, duplicate_insert (the same certificate again: refused),
 *   wildcard_4_threads (4 threads behind a start barrier; elapsed is the
 *   wall time over all, ns_per_op divides by 4 x iterations).
 * The scale of an origin cache (a TLS host's names):
 *   empty_miss (nothing cached), single_hit (one name), 64_origins_hit,
 *   256_origins_hit (a certificate per name, the names looked up in
 *   turn), full_hit / full_miss (256 names x 8 certificates each),
 *   shared_full_hit / shared_full_miss (4 threads on that one cache).
 * The gate (guarded group):
 *   untracked_guard_drop: take and drop the key gate of a name that no
 *   operation holds (what every gated store call pays first).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"
#include "tinysecurity/certcache.h"
#include "perf/benchutil.h"
#include "broker/storage/gates.h"

/* 2100-01-01: a certificate that does not expire during a run (0 is
 * expired: the cache never returns an expired certificate). */
#define FAR ((int64_t)4102444800)
#define ORIGINS 256
#define PER_NAME 8

static size_t ops = 100000;
static int samples = 9;
static const char *only;
/* Per thread, so that the threaded cases share no written cache line. */
static _Thread_local volatile uintptr_t sink;

struct bcase {
	const char *name;
	struct tsec_certcache *cache;
	const char *const *names;    /* looked up in turn */
	size_t nnames;
	bool hit;                    /* every lookup must hit (or miss) */
	int threads;
	void (*fn)(const struct bcase *);
};

static char origin[ORIGINS][32], stranger[ORIGINS][32];
static const char *origin_p[ORIGINS], *stranger_p[ORIGINS];

static void lookups(const struct bcase *c)
{
	struct tsec_cert_match m;

	for (size_t i = 0, j = 0; i < ops; i++) {
		int rc = tsec_certcache_lookup(c->cache, c->names[j], &m);

		if ((rc == 0) != c->hit)
			abort();
		sink += rc ? 0 : (uintptr_t)m.data;
		if (++j == c->nnames)
			j = 0;
	}
}

static void lookups_all(const struct bcase *c)
{
	struct tsec_cert_match m[4];

	for (size_t i = 0; i < ops; i++)
		if (tsec_certcache_lookup_all(c->cache, c->names[0], m, 4) != 1)
			abort();
}

static void duplicate_insert(const struct bcase *c)
{
	static const uint8_t id[32] = { 1, 2, 3 };
	const char *names[] = { "example.com", "*.example.com" };
	struct tsec_error err;

	for (size_t i = 0; i < ops; i++)
		if (tsec_certcache_insert_names(c->cache, id, names, 2, FAR, NULL, &err) !=
		    TSEC_EEXIST)
			abort();
}

static struct tsec__gates gates;

static void guard_drop(const struct bcase *c)
{
	struct tsec__gateset set;

	for (size_t i = 0; i < ops; i++) {
		const char *key = c->names[i & (ORIGINS - 1)];

		if (tsec__gates_lock(&gates, &key, 1, &set))
			abort();
		tsec__gates_unlock(&gates, &set);
	}
}

static pthread_barrier_t start;

static void *thread_main(void *arg)
{
	const struct bcase *c = arg;

	pthread_barrier_wait(&start);
	c->fn(c);
	return NULL;
}

static void run(const struct bcase *c)
{
	c->fn(c); /* warm-up */
	for (int s = 0; s < samples; s++) {
		pthread_t th[4];
		uint64_t t0, el;
		size_t n = ops * (size_t)(c->threads ? c->threads : 1);

		if (c->threads) {
			pthread_barrier_init(&start, NULL, (unsigned)c->threads + 1);
			for (int i = 0; i < c->threads; i++)
				if (pthread_create(&th[i], NULL, thread_main, (void *)c))
					abort();
			pthread_barrier_wait(&start);
		}
		t0 = bench_now();
		if (c->threads)
			for (int i = 0; i < c->threads; i++)
				pthread_join(th[i], NULL);
		else
			c->fn(c);
		el = bench_now() - t0;
		if (c->threads)
			pthread_barrier_destroy(&start);
		printf("%s,%d,%zu,%llu,%.1f\n", c->name, s, n, (unsigned long long)el,
		       (double)el / (double)n);
	}
}

/* A cache of `norigins` names, `per` certificates each. */
static struct tsec_certcache *cache_of(size_t norigins, size_t per)
{
	static int data = 1;
	struct tsec_certcache *c;
	struct tsec_error err;

	if (tsec_certcache_new(&c, ORIGINS * PER_NAME + 16, NULL))
		abort();
	for (size_t o = 0; o < norigins; o++)
		for (size_t k = 0; k < per; k++) {
			uint8_t id[32] = { 0 };

			id[0] = (uint8_t)o;
			id[1] = (uint8_t)(o >> 8);
			id[2] = (uint8_t)k;
			id[3] = 0xc0;
			if (tsec_certcache_insert_names(c, id, &origin_p[o], 1, FAR, &data, &err))
				abort();
		}
	return c;
}

int main(int argc, char **argv)
{
	static const char *const one[] = { "example.com" }, *const wild[] = { "api.example.com" },
			       *const miss[] = { "api.deep.other.invalid" };
	const char *names[] = { "example.com", "*.example.com" };
	static const uint8_t id[32] = { 1, 2, 3 };
	static int data = 1;
	struct tsec_certcache *example, *empty, *single, *o64, *o256, *full;
	struct tsec_error err;

	if (argc > 1)
		ops = strtoul(argv[1], NULL, 10);
	if (getenv("BENCH_SAMPLES"))
		samples = atoi(getenv("BENCH_SAMPLES"));
	only = getenv("BENCH_ONLY");
	if (!ops || samples <= 0 ||
	    (only && strcmp(only, "cache") && strcmp(only, "guarded"))) {
		fprintf(stderr, "usage: [BENCH_SAMPLES=N] [BENCH_ONLY=cache|guarded] "
			"bench_certcache [LOOKUPS_PER_THREAD]\n");
		return 2;
	}
	for (int i = 0; i < ORIGINS; i++) {
		snprintf(origin[i], sizeof(origin[i]), "o%d.example.net", i);
		snprintf(stranger[i], sizeof(stranger[i]), "x%d.example.net", i);
		origin_p[i] = origin[i];
		stranger_p[i] = stranger[i];
	}
	if (tsec_certcache_new(&example, 1024, NULL) ||
	    tsec_certcache_insert_names(example, id, names, 2, FAR, &data, &err))
		return 2;
	empty = cache_of(0, 0);
	single = cache_of(1, 1);
	o64 = cache_of(64, 1);
	o256 = cache_of(ORIGINS, 1);
	full = cache_of(ORIGINS, PER_NAME);
	tsec__gates_init(&gates);

	const struct bcase cache_cases[] = {
		{ "lookup_exact", example, one, 1, true, 0, lookups },
		{ "lookup_wildcard", example, wild, 1, true, 0, lookups },
		{ "lookup_miss", example, miss, 1, false, 0, lookups },
		{ "lookup_all", example, wild, 1, true, 0, lookups_all },
		{ "duplicate_insert", example, NULL, 0, true, 0, duplicate_insert },
		{ "wildcard_4_threads", example, wild, 1, true, 4, lookups },
		{ "empty_miss", empty, origin_p, ORIGINS, false, 0, lookups },
		{ "single_hit", single, origin_p, 1, true, 0, lookups },
		{ "64_origins_hit", o64, origin_p, 64, true, 0, lookups },
		{ "256_origins_hit", o256, origin_p, ORIGINS, true, 0, lookups },
		{ "full_hit", full, origin_p, ORIGINS, true, 0, lookups },
		{ "full_miss", full, stranger_p, ORIGINS, false, 0, lookups },
		{ "shared_full_hit", full, origin_p, ORIGINS, true, 4, lookups },
		{ "shared_full_miss", full, stranger_p, ORIGINS, false, 4, lookups },
	};
	const struct bcase gate_cases[] = {
		{ "untracked_guard_drop", NULL, origin_p, ORIGINS, true, 0, guard_drop },
	};

	printf("# bench_certcache: %s build, %zu lookups per thread, %d samples\n",
	       tsec_build_name(TSEC_BUILD_THIS), ops, samples);
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	if (!only || !strcmp(only, "cache"))
		for (size_t i = 0; i < sizeof(cache_cases) / sizeof(cache_cases[0]); i++)
			run(&cache_cases[i]);
	if (!only || !strcmp(only, "guarded"))
		for (size_t i = 0; i < sizeof(gate_cases) / sizeof(gate_cases[0]); i++)
			run(&gate_cases[i]);
	tsec__gates_destroy(&gates);
	tsec_certcache_free(&example);
	tsec_certcache_free(&empty);
	tsec_certcache_free(&single);
	tsec_certcache_free(&o64);
	tsec_certcache_free(&o256);
	tsec_certcache_free(&full);
	return 0;
}
