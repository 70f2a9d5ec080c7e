/*
 * bench_fleet: the storage operations on file, etcd and redis side by
 * side in one run, each with and without a LocalCache, and the
 * throughput of one against two tsec-brokers on one etcd.
 *
 *   build/release/bench_fleet [N]        (N operations per case; 2000)
 *   BENCH_ONLY=redis build/release/bench_fleet N    one case, no brokers
 *
 * etcd (one member) and redis-server are started here on loopback with
 * temporary data folders (redis with appendfsync always, as a store of
 * private keys should run), and stopped at the end.  Every operation goes
 * through the gated store (the policy check included).  Cases: load of a
 * 4 KiB value, exists, put of 4 KiB, a 3-key put_many, lock acquire +
 * release.  CSV: case,samples,first_ns,p50_ns,p90_ns,p99_ns,p999_ns,max_ns.
 *
 * Then brokers: 16 client threads calling store.get of a cached key
 * (etcd with a LocalCache) for a fixed number of calls, all to one
 * broker, then spread over two: "brokers_N,calls,elapsed_ns,calls_per_s".
 * The machine has the cores it has: two brokers on two cores compete
 * with the 16 clients for them.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tinysecurity/client.h"
#include "tinysecurity/store.h"
#include "perf/benchutil.h"
#include "tests/servers.h"

#define MODULE bench_module()

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"app\", \"effect\": \"allow\","
	" \"principal\": [\"svc:app\"], \"action\": [\"storage.*\", \"lock.*\"],"
	" \"resource\": [\"**\"], \"when\": {\"ttl_ms_max\": 60000}}]}";

static struct tsec_principal app;
static const char *only;

static int want(const char *label)
{
	return !only || !strcmp(only, label);
}
static char value[4096];
static int N = 2000;

static void die(const char *what, const struct tsec_error *err)
{
	fprintf(stderr, "bench_fleet: %s: %s\n", what, err ? err->msg : "failed");
	exit(2);
}

static void one_backend(const char *label, struct tsec_bus *bus, struct tsec_store_opts *o)
{
	struct tsec_store *s;
	struct tsec_error err;
	uint64_t *t = calloc((size_t)N, sizeof(*t)), first;
	char name[96], key[64];
	struct tsec_put g[3] = { { "tx/a", value, 1024 }, { "tx/b", value, 1024 },
				 { "tx/c", value, 1024 } };

	if (tsec_store_open_opts(&s, o, bus, NULL, &err))
		die(label, &err);
	if (tsec_store_put(s, &app, "certificates/a/example.com.crt", value, sizeof(value), &err))
		die("put", &err);
#define CASE(what, body)                                                             \
	do {                                                                          \
		for (int i = 0; i < N; i++) {                                         \
			uint64_t t0 = bench_now();                                    \
			body;                                                         \
			t[i] = bench_now() - t0;                                      \
		}                                                                     \
		first = t[0];                                                         \
		snprintf(name, sizeof(name), "%s_%s", label, what);                   \
		printf("latency,");                                                   \
		bench_print_latency(name, first, t, (size_t)N);                       \
	} while (0)
	CASE("load", {
		char *v;
		size_t n;
		if (tsec_store_get(s, &app, "certificates/a/example.com.crt", &v, &n, &err))
			die("get", &err);
		free(v);
	});
	CASE("exists", {
		int ex;
		if (tsec_store_exists(s, &app, "certificates/a/example.com.crt", &ex, &err) || !ex)
			die("exists", &err);
	});
	CASE("put", {
		snprintf(key, sizeof(key), "put/k%d", i & 63);
		if (tsec_store_put(s, &app, key, value, sizeof(value), &err))
			die("put", &err);
	});
	CASE("put_many_3", {
		if (tsec_store_put_many(s, &app, g, 3, &err))
			die("put_many", &err);
	});
	CASE("lock_acquire_release", {
		struct tsec_lock lk;
		if (tsec_lock_acquire(s, &app, "bench", 30000, 1000, &lk, &err) ||
		    tsec_lock_release(s, &app, &lk, &err))
			die("lock", &err);
	});
#undef CASE
	tsec_store_close(&s);
	free(t);
}

/* ---- brokers ---- */

static char dir[64], ipc[2][200], cfg[2][200];
static pid_t pid[2];
static atomic_long calls_left;

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f))
		die(path, NULL);
}

static struct tsec_client *client(int which)
{
	struct tsec_client_opts o = { .endpoint = ipc[which], .timeout_ms = 10000 };
	struct tsec_client *c;
	struct tsec_error err;

	if (tsec_client_open(&c, &o, &err))
		die("client", &err);
	return c;
}

static void start_broker(int i, const char *etcd_ep)
{
	char text[2048], path[160];

	snprintf(ipc[i], sizeof(ipc[i]), "ipc://%s/b%d.sock", dir, i);
	snprintf(cfg[i], sizeof(cfg[i]), "%s/b%d.json", dir, i);
	snprintf(path, sizeof(path), "%s/policy.json", dir);
	write_file(path, policy);
	snprintf(text, sizeof(text),
		 "{\"module\": \"%s\", \"policy\": \"%s\", \"allow_unsigned_policy\": true,"
		 " \"state_dir\": \"%s\", \"workers\": 4,"
		 " \"storage\": {\"backend\": \"etcd\", \"endpoints\": [\"%s\"], \"prefix\": \"bench\","
		 "  \"cache_bytes\": 1048576},"
		 " \"endpoints\": [\"%s\"], \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:app\"}]}",
		 MODULE, path, dir, etcd_ep, ipc[i], (int)getuid());
	write_file(cfg[i], text);
	snprintf(path, sizeof(path), "%s/b%d.log", dir, i);
	pid[i] = bench_broker_start(cfg[i], ipc[i], path);
}

static void *caller(void *arg)
{
	struct tsec_client *c = client((int)(intptr_t)arg);
	struct tsec_error err;

	while (atomic_fetch_sub(&calls_left, 1) > 0)
		if (tsec_client_call(c, "store.get", "{\"key\": \"certificates/a/example.com.crt\"}",
				     NULL, &err))
			die("store.get", &err);
	tsec_client_close(&c);
	return NULL;
}

static void throughput(int brokers, long calls)
{
	pthread_t th[16];
	uint64_t t0;

	atomic_store(&calls_left, calls);
	t0 = bench_now();
	for (int i = 0; i < 16; i++)
		pthread_create(&th[i], NULL, caller, (void *)(intptr_t)(i % brokers));
	for (int i = 0; i < 16; i++)
		pthread_join(th[i], NULL);
	t0 = bench_now() - t0;
	printf("brokers_%d,%ld,%llu,%.0f\n", brokers, calls, (unsigned long long)t0,
	       (double)calls * 1e9 / (double)t0);
}

int main(int argc, char **argv)
{
	struct tu_server etcd, redis;
	struct tsec_bus *bus;
	struct tsec_error err;
	char root[] = "/tmp/tsec-bench-fleet-XXXXXX", store_dir[96];

	if (argc > 1)
		N = atoi(argv[1]) > 0 ? atoi(argv[1]) : N;
	app.id = tsec_str_c("svc:app");
	memset(value, 'v', sizeof(value));
	if (!mkdtemp(root))
		return 2;
	snprintf(dir, sizeof(dir), "%s", root);
	if (tu_etcd_start(&etcd, 1) || tu_redis_start(&redis))
		die("cannot start etcd and redis-server (scripts/deps.sh servers)", NULL);
	if (tsec_bus_new(&bus) || tsec_bus_load(bus, "policy", MODULE, policy, strlen(policy), &err))
		die("bus", &err);
	printf("# bench_fleet: %s build, %d operations per case; etcd and redis on loopback\n",
	       tsec_build_name(TSEC_BUILD_THIS), N);
	printf("# latency,case,samples,first_ns,p50_ns,p90_ns,p99_ns,p999_ns,max_ns\n");
	/* BENCH_ONLY=LABEL (file, etcd, redis, file_cache, ...): that case
	 * alone and no brokers (perf/redis_instructions.sh counts one
	 * backend's calls under callgrind). */
	only = getenv("BENCH_ONLY");
	for (int cached = 0; cached < 2; cached++) {
		struct tsec_store_opts f = { .backend = "file", .root = store_dir };
		struct tsec_store_opts e = { .backend = "etcd", .endpoints = etcd.endpoints,
					     .prefix = cached ? "bench/c" : "bench/p" };
		struct tsec_store_opts r = { .backend = "redis", .endpoints = redis.endpoints,
					     .prefix = cached ? "bench/c" : "bench/p" };
		size_t cb = cached ? (size_t)16 << 20 : 0;

		snprintf(store_dir, sizeof(store_dir), "%s/files%d", root, cached);
		f.cache_bytes = e.cache_bytes = r.cache_bytes = cb;
		if (want(cached ? "file_cache" : "file"))
			one_backend(cached ? "file_cache" : "file", bus, &f);
		if (want(cached ? "etcd_cache" : "etcd"))
			one_backend(cached ? "etcd_cache" : "etcd", bus, &e);
		if (want(cached ? "redis_cache" : "redis"))
			one_backend(cached ? "redis_cache" : "redis", bus, &r);
	}
	tsec_bus_free(&bus);
	if (only) {
		char cmd[128];

		tu_server_stop(&etcd);
		tu_server_stop(&redis);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		return system(cmd) ? 1 : 0;
	}
	/* The key every broker call reads. */
	{
		struct tsec_store_opts e = { .backend = "etcd", .endpoints = etcd.endpoints,
					     .prefix = "bench" };
		struct tsec_store *s;

		if (tsec_bus_new(&bus) ||
		    tsec_bus_load(bus, "policy", MODULE, policy, strlen(policy), &err) ||
		    tsec_store_open_opts(&s, &e, bus, NULL, &err) ||
		    tsec_store_put(s, &app, "certificates/a/example.com.crt", value, 1024, &err))
			die("seed", &err);
		tsec_store_close(&s);
		tsec_bus_free(&bus);
	}
	start_broker(0, etcd.endpoints);
	start_broker(1, etcd.endpoints);
	printf("case,calls,elapsed_ns,calls_per_s\n");
	for (int round = 0; round < 2; round++) {
		throughput(1, 20000);
		throughput(2, 20000);
	}
	for (int i = 0; i < 2; i++)
		if (bench_broker_stop(pid[i]))
			die("tsec-broker", NULL);
	tu_server_stop(&etcd);
	tu_server_stop(&redis);
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd))
			return 1;
	}
	return 0;
}
