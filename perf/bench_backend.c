/*
 * bench_backend: the workload of certmagic's Rust port's cache_paths
 * benchmark, on our backends.
 *
 *   build/release/bench_backend [SAMPLES]      (default 5)
 *
 * local_hit_64/4096       a LocalCache hit over the memory backend (64 and
 *                         4096 cached keys), the backend interface called
 *                         directly: what the cache itself costs
 * local_write_64/4096     a write through the LocalCache to the memory
 *                         backend (64 and 4096 keys, 64-byte values)
 * resource_load_simulated_2ms, resource_has_simulated_2ms
 *                         one load / exists through the gated store over
 *                         a memory backend that waits 2 ms per operation
 *                         (a remote store): the floor is 2 ms
 * local_8_writes_simulated_2ms
 *                         eight independent writes started together (one
 *                         thread each) through the store over that 2 ms
 *                         backend: they overlap, so about one write's time
 * guarded_8_independent_keys_1ms, guarded_8_same_key_1ms
 *                         eight writers through the store's per-key gates
 *                         on a 1 ms backend: different keys run in
 *                         parallel (about 1x), one key serialises (8x)
 * gated_* rows:           the same hit and write through the store, policy
 *                         check and gates included
 *
 * Every case runs one warm-up sample first, not printed.
 * CSV: case,sample,iterations,elapsed_ns,ns_per_op.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/store.h"
#include "broker/storage/backend.h"
#include "perf/benchutil.h"
#include "broker/storage/localcache.h"

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"app\", \"effect\": \"allow\","
	" \"principal\": [\"svc:app\"], \"action\": [\"storage.*\"],"
	" \"resource\": [\"certificates/**\"]}]}";

static struct tsec_principal app;
static struct tsec_bus *bus;
static int samples = 5;

static void die(const char *what, const struct tsec_error *err)
{
	fprintf(stderr, "bench_backend: %s: %s\n", what, err ? err->msg : "");
	exit(2);
}

static void key_of(char *buf, size_t n, unsigned i)
{
	snprintf(buf, n, "certificates/acme/d%u.example.com/d%u.example.com.crt", i, i);
}

static void row(const char *name, int s, uint64_t iters, uint64_t ns)
{
	printf("%s,%d,%llu,%llu,%.1f\n", name, s, (unsigned long long)iters,
	       (unsigned long long)ns, (double)ns / (double)iters);
}

/* ---- the cache itself, through the backend interface ---- */

static void local_cases(unsigned nkeys)
{
	struct tsec__backend *mem, *lc;
	struct tsec__skey *sk = calloc(nkeys, sizeof(*sk));
	struct tsec_error err;
	char name[64], k[256], value[64];
	const unsigned iters = getenv("BENCH_ITERS") ? (unsigned)atoi(getenv("BENCH_ITERS")) : 1000000;

	memset(value, 'v', sizeof(value));
	if (!sk || tsec__memory_open(&mem, 0, &err) ||
	    tsec__localcache_open(&lc, mem, 64u << 20, &err))
		die("open", &err);
	for (unsigned i = 0; i < nkeys; i++) {
		struct tsec__bput p;
		key_of(k, sizeof(k), i);
		if (tsec__skey_parse(k, false, &sk[i], &err))
			die("key", &err);
		p = (struct tsec__bput){ &sk[i], value, sizeof(value) };
		if (lc->ops->put_many(lc, &p, 1, NULL, NULL, &err))
			die("fill", &err);
	}
	snprintf(name, sizeof(name), "local_hit_%u", nkeys);
	for (int s = -1; s < samples; s++) {
		uint64_t t0 = bench_now();
		for (unsigned i = 0; i < iters; i++) {
			char *v;
			size_t n;
			if (lc->ops->get(lc, &sk[i % nkeys], 1 << 20, &v, &n, &err))
				die("hit", &err);
			free(v);
		}
		if (s >= 0)
			row(name, s, iters, bench_now() - t0);
	}
	snprintf(name, sizeof(name), "local_write_%u", nkeys);
	for (int s = -1; s < samples; s++) {
		uint64_t t0 = bench_now();
		for (unsigned i = 0; i < iters; i++) {
			struct tsec__bput p = { &sk[i % nkeys], value, sizeof(value) };
			if (lc->ops->put_many(lc, &p, 1, NULL, NULL, &err))
				die("write", &err);
		}
		if (s >= 0)
			row(name, s, iters, bench_now() - t0);
	}
	lc->ops->close(lc);
	free(sk);
}

/* ---- through the gated store ---- */

static struct tsec_store *open_store(uint32_t delay_us, size_t cache)
{
	struct tsec_store_opts o = { .backend = "memory", .delay_us = delay_us,
				     .cache_bytes = cache };
	struct tsec_store *s;
	struct tsec_error err;

	if (tsec_store_open_opts(&s, &o, bus, NULL, &err))
		die("store", &err);
	return s;
}

static void gated_cases(void)
{
	struct tsec_store *s = open_store(0, 64u << 20);
	struct tsec_error err;
	char k[256], value[64];
	const unsigned iters = 200000;

	memset(value, 'v', sizeof(value));
	key_of(k, sizeof(k), 1);
	if (tsec_store_put(s, &app, k, value, sizeof(value), &err))
		die("put", &err);
	for (int sm = -1; sm < samples; sm++) {
		uint64_t t0 = bench_now();
		for (unsigned i = 0; i < iters; i++) {
			char *v;
			size_t n;
			if (tsec_store_get(s, &app, k, &v, &n, &err))
				die("get", &err);
			free(v);
		}
		if (sm >= 0)
			row("gated_local_hit", sm, iters, bench_now() - t0);
	}
	for (int sm = -1; sm < samples; sm++) {
		uint64_t t0 = bench_now();
		for (unsigned i = 0; i < iters; i++)
			if (tsec_store_put(s, &app, k, value, sizeof(value), &err))
				die("put", &err);
		if (sm >= 0)
			row("gated_local_write", sm, iters, bench_now() - t0);
	}
	tsec_store_close(&s);
}

static void simulated_one(void)
{
	struct tsec_store *s = open_store(2000, 0);
	struct tsec_error err;
	char k[256];
	const unsigned iters = 50;

	key_of(k, sizeof(k), 7);
	if (tsec_store_put(s, &app, k, "pem", 3, &err))
		die("put", &err);
	for (int sm = -1; sm < samples; sm++) {
		uint64_t t0 = bench_now();
		for (unsigned i = 0; i < iters; i++) {
			char *v;
			size_t n;
			if (tsec_store_get(s, &app, k, &v, &n, &err))
				die("load", &err);
			free(v);
		}
		if (sm >= 0)
			row("resource_load_simulated_2ms", sm, iters, bench_now() - t0);
		t0 = bench_now();
		for (unsigned i = 0; i < iters; i++) {
			int ex;
			if (tsec_store_exists(s, &app, k, &ex, &err) || !ex)
				die("exists", &err);
		}
		if (sm >= 0)
			row("resource_has_simulated_2ms", sm, iters, bench_now() - t0);
	}
	tsec_store_close(&s);
}

struct writer {
	struct tsec_store *s;
	char key[256];
	pthread_barrier_t *start;
};

static void *write_once(void *arg)
{
	struct writer *w = arg;
	struct tsec_error err;

	pthread_barrier_wait(w->start);
	if (tsec_store_put(w->s, &app, w->key, "value", 5, &err))
		die("parallel put", &err);
	return NULL;
}

/* Eight writers started together; the batch's wall time. */
static uint64_t batch_of_8(struct tsec_store *s, int same_key)
{
	struct writer w[8];
	pthread_t th[8];
	pthread_barrier_t start;
	uint64_t t0;

	pthread_barrier_init(&start, NULL, 9);
	for (int i = 0; i < 8; i++) {
		w[i].s = s;
		w[i].start = &start;
		key_of(w[i].key, sizeof(w[i].key), same_key ? 0 : (unsigned)i);
		pthread_create(&th[i], NULL, write_once, &w[i]);
	}
	t0 = bench_now();
	pthread_barrier_wait(&start);
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
	return bench_now() - t0;
}

static void batches(void)
{
	struct tsec_store *s2 = open_store(2000, 1u << 20), *s1 = open_store(1000, 0);
	const int rounds = 20;

	for (int sm = -1; sm < samples; sm++) {
		uint64_t a = 0, b = 0, c = 0, d = 0;
		for (int r = 0; r < rounds; r++) {
			struct tsec_error err;
			char k[256];
			uint64_t t0 = bench_now();
			key_of(k, sizeof(k), 100);
			if (tsec_store_put(s2, &app, k, "value", 5, &err))
				die("put", &err);
			a += bench_now() - t0;
			b += batch_of_8(s2, 0);
			c += batch_of_8(s1, 0);
			d += batch_of_8(s1, 1);
		}
		if (sm < 0)
			continue;            /* the warm-up round: threads, gates, cache */
		row("local_1_write_simulated_2ms", sm, rounds, a);
		row("local_8_writes_simulated_2ms", sm, rounds, b);
		row("guarded_8_independent_keys_1ms", sm, rounds, c);
		row("guarded_8_same_key_1ms", sm, rounds, d);
	}
	tsec_store_close(&s2);
	tsec_store_close(&s1);
}

int main(int argc, char **argv)
{
	struct tsec_error err;

	if (argc > 1)
		samples = atoi(argv[1]) > 0 ? atoi(argv[1]) : 5;
	app.id = tsec_str_c("svc:app");
	if (tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", bench_module(), policy,
			  strlen(policy), &err))
		die("bus", &err);
	printf("# bench_backend: %s build, %d samples per case\n",
	       tsec_build_name(TSEC_BUILD_THIS), samples);
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	local_cases(64);
	local_cases(4096);
	gated_cases();
	simulated_one();
	batches();
	tsec_bus_free(&bus);
	return 0;
}
