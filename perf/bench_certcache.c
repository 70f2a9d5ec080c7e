/*
 * bench_certcache: lookups in the certificate cache.
 *
 *   build/release/bench_certcache [OPS_PER_SAMPLE]
 *
 * One certificate with SANs example.com and *.example.com; 5 samples of
 * 100,000 operations per case.  CSV: case,sample,iterations,elapsed_ns,ns_per_op.
 * wildcard_4_threads: 4 threads behind a start barrier each do the
 * sample's operations; elapsed is the wall time over all of them and
 * ns_per_op divides it by the total (4 x iterations).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/certcache.h"
#include "perf/benchutil.h"

static struct tsec_certcache *cache;
static uint8_t id[32] = { 1, 2, 3 };
static size_t ops = 100000;
/* 2100-01-01: a certificate that does not expire during a run (0 is
 * expired: the cache never returns an expired certificate). */
#define FAR ((int64_t)4102444800)
/* Per thread, so that the 4-thread case shares no written cache line. */
static _Thread_local volatile uintptr_t sink;

static void lookup_exact(void)
{
	struct tsec_cert_match m;
	for (size_t i = 0; i < ops; i++) {
		if (tsec_certcache_lookup(cache, "example.com", &m))
			abort();
		sink += (uintptr_t)m.data;
	}
}

static void lookup_wildcard(void)
{
	struct tsec_cert_match m;
	for (size_t i = 0; i < ops; i++) {
		if (tsec_certcache_lookup(cache, "api.example.com", &m))
			abort();
		sink += (uintptr_t)m.data;
	}
}

static void lookup_miss(void)
{
	struct tsec_cert_match m;
	for (size_t i = 0; i < ops; i++)
		if (tsec_certcache_lookup(cache, "api.deep.other.invalid", &m) == 0)
			abort();
}

static void lookup_all(void)
{
	struct tsec_cert_match m[4];
	for (size_t i = 0; i < ops; i++)
		if (tsec_certcache_lookup_all(cache, "api.example.com", m, 4) != 1)
			abort();
}

static void duplicate_insert(void)
{
	const char *names[] = { "example.com", "*.example.com" };
	struct tsec_error err;
	for (size_t i = 0; i < ops; i++)
		if (tsec_certcache_insert_names(cache, id, names, 2, FAR, NULL, &err) != TSEC_EEXIST)
			abort();
}

static pthread_barrier_t barrier;

static void *thread_main(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier);
	lookup_wildcard();
	return NULL;
}

static void run(const char *name, void (*fn)(void))
{
	fn(); /* warm-up */
	for (int s = 0; s < 5; s++) {
		uint64_t t0 = bench_now();
		fn();
		uint64_t el = bench_now() - t0;
		printf("%s,%d,%zu,%llu,%.1f\n", name, s, ops, (unsigned long long)el,
		       (double)el / (double)ops);
	}
}

int main(int argc, char **argv)
{
	const char *names[] = { "example.com", "*.example.com" };
	static int data = 1;
	struct tsec_error err;

	if (argc > 1)
		ops = strtoul(argv[1], NULL, 10);
	if (!ops || tsec_certcache_new(&cache, 1024, NULL) ||
	    tsec_certcache_insert_names(cache, id, names, 2, FAR, &data, &err))
		return 2;
	printf("# bench_certcache: %s build, %zu operations per sample\n",
	       tsec_build_name(TSEC_BUILD_THIS), ops);
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	run("lookup_exact", lookup_exact);
	run("lookup_wildcard", lookup_wildcard);
	run("lookup_miss", lookup_miss);
	run("lookup_all", lookup_all);
	run("duplicate_insert", duplicate_insert);
	for (int s = 0; s < 5; s++) {
		pthread_t th[4];
		uint64_t t0;
		pthread_barrier_init(&barrier, NULL, 5);
		for (int i = 0; i < 4; i++)
			pthread_create(&th[i], NULL, thread_main, NULL);
		pthread_barrier_wait(&barrier);
		t0 = bench_now();
		for (int i = 0; i < 4; i++)
			pthread_join(th[i], NULL);
		uint64_t el = bench_now() - t0;
		pthread_barrier_destroy(&barrier);
		printf("wildcard_4_threads,%d,%zu,%llu,%.1f\n", s, ops * 4,
		       (unsigned long long)el, (double)el / (double)(ops * 4));
	}
	tsec_certcache_free(&cache);
	return 0;
}
