/*
 * bench_store: what the policy check costs the store, and lock costs.
 *
 *   build/release/bench_store [ROOT]      (default: a new folder in /tmp)
 *
 * A 4 KiB certificate and a 2 KiB key on a warm file system, read and
 * tested for existence 20,000 times per sample, 5 samples: through the
 * store as an allowed principal (policy check included) and through plain
 * open/read/close and fstatat on the same files.  The difference of the
 * per-operation times is what gating costs.  Then lock acquire+release,
 * uncontended and with 4 threads contending for one lock.
 * policy_check_only is the bus Check the store makes, alone: gated minus
 * plain is that plus the store's safe path resolution (openat2 kept
 * beneath the root and off symbolic links, where plain code calls one
 * fstatat).
 * CSV: case,sample,iterations,elapsed_ns,ns_per_op.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tinysecurity/store.h"
#include "perf/benchutil.h"

#define N 20000

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"app\", \"effect\": \"allow\","
	" \"principal\": [\"svc:app\"], \"action\": [\"storage.*\", \"lock.*\"],"
	" \"resource\": [\"certificates/**\", \"locks/*\"], \"when\": {\"ttl_ms_max\": 60000}}]}";

static struct tsec_store *store;
static struct tsec_principal app;
static char root[256];
static const char *crt = "certificates/acme/example.com/example.com.crt";
static const char *key = "certificates/acme/example.com/example.com.key";

static void gated_load(void)
{
	struct tsec_error err;
	char *v;
	size_t n;
	for (int i = 0; i < N; i++) {
		if (tsec_store_get(store, &app, i & 1 ? key : crt, &v, &n, &err))
			abort();
		free(v);
	}
}

static void plain_load(void)
{
	char path[2][512];
	snprintf(path[0], sizeof(path[0]), "%s/%s", root, crt);
	snprintf(path[1], sizeof(path[1]), "%s/%s", root, key);
	for (int i = 0; i < N; i++) {
		int fd = open(path[i & 1], O_RDONLY | O_CLOEXEC);
		struct stat sb;
		char *v;
		if (fd < 0 || fstat(fd, &sb) < 0 || !(v = malloc((size_t)sb.st_size + 1)) ||
		    read(fd, v, (size_t)sb.st_size) != sb.st_size)
			abort();
		close(fd);
		free(v);
	}
}

static void gated_exists(void)
{
	struct tsec_error err;
	int ex;
	for (int i = 0; i < N; i++)
		if (tsec_store_exists(store, &app, i & 1 ? key : crt, &ex, &err) || !ex)
			abort();
}

static void plain_exists(void)
{
	char path[2][512];
	struct stat sb;
	snprintf(path[0], sizeof(path[0]), "%s/%s", root, crt);
	snprintf(path[1], sizeof(path[1]), "%s/%s", root, key);
	for (int i = 0; i < N; i++)
		if (fstatat(AT_FDCWD, path[i & 1], &sb, AT_SYMLINK_NOFOLLOW) < 0)
			abort();
}

/* The policy check alone, as the store makes it for an exists. */
static struct tsec_bus *bus;

static void check_only(void)
{
	struct tsec_request r;
	struct tsec_decision d;
	struct tsec_error err;

	memset(&r, 0, sizeof(r));
	r.principal = app.id;
	r.action = tsec_str_c("storage.exists");
	for (int i = 0; i < N; i++) {
		r.resource = tsec_str_c(i & 1 ? key : crt);
		if (tsec_bus_check(bus, "policy", &r, 1, &d, &err) || !d.allow)
			abort();
	}
}

static void lock_cycle(int n, const char *name)
{
	struct tsec_error err;
	struct tsec_lock lk;
	for (int i = 0; i < n; i++) {
		if (tsec_lock_acquire(store, &app, name, 10000, 60000, &lk, &err) ||
		    tsec_lock_release(store, &app, &lk, &err))
			abort();
	}
}

static void lock_uncontended(void)
{
	lock_cycle(500, "solo");
}

static void *contender(void *arg)
{
	(void)arg;
	lock_cycle(100, "shared");
	return NULL;
}

static void lock_contended(void)
{
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, contender, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
}

/* The crash-safe 3-key group against three single puts of the same keys
 * (each single put is itself atomic and durable: write, fsync, rename,
 * fsync the folder). */
#define PUTS 100
static char cert_value[4096];

static void put_many_3(void)
{
	struct tsec_error err;
	struct tsec_put p[3] = {
		{ crt, cert_value, 4096 }, { key, cert_value, 2048 },
		{ "certificates/acme/example.com/example.com.json", cert_value, 200 },
	};
	for (int i = 0; i < PUTS; i++)
		if (tsec_store_put_many(store, &app, p, 3, &err))
			abort();
}

static void put_single_x3(void)
{
	struct tsec_error err;
	for (int i = 0; i < PUTS; i++)
		if (tsec_store_put(store, &app, crt, cert_value, 4096, &err) ||
		    tsec_store_put(store, &app, key, cert_value, 2048, &err) ||
		    tsec_store_put(store, &app, "certificates/acme/example.com/example.com.json",
				   cert_value, 200, &err))
			abort();
}

static void run(const char *name, void (*fn)(void), int iters)
{
	fn();
	for (int s = 0; s < 5; s++) {
		uint64_t t0 = bench_now();
		fn();
		uint64_t el = bench_now() - t0;
		printf("%s,%d,%d,%llu,%.1f\n", name, s, iters, (unsigned long long)el,
		       (double)el / iters);
	}
}

int main(int argc, char **argv)
{
	struct tsec_error err;
	static char value[4096];

	if (argc > 1)
		snprintf(root, sizeof(root), "%s", argv[1]);
	else {
		snprintf(root, sizeof(root), "/tmp/tsec-bench-XXXXXX");
		if (!mkdtemp(root))
			return 2;
	}
	app.id = tsec_str_c("svc:app");
	if (tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", bench_module(),
			  policy, strlen(policy), &err) ||
	    tsec_store_open(&store, root, bus, NULL, &err)) {
		fprintf(stderr, "bench_store: %s\n", err.msg);
		return 2;
	}
	memset(value, 'c', sizeof(value));
	if (tsec_store_put(store, &app, crt, value, 4096, &err) ||
	    tsec_store_put(store, &app, key, value, 2048, &err)) {
		fprintf(stderr, "bench_store: %s\n", err.msg);
		return 2;
	}
	printf("# bench_store: %s build, root %s\n", tsec_build_name(TSEC_BUILD_THIS), root);
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	run("load_gated", gated_load, N);
	run("load_plain", plain_load, N);
	run("exists_gated", gated_exists, N);
	run("exists_plain", plain_exists, N);
	run("policy_check_only", check_only, N);
	memset(cert_value, 'p', sizeof(cert_value));
	run("put_many_3_crash_safe", put_many_3, PUTS);
	run("put_single_x3", put_single_x3, PUTS);
	run("lock_acquire_release", lock_uncontended, 500);
	run("lock_acquire_release_4_threads", lock_contended, 400);
	tsec_store_close(&store);
	tsec_bus_free(&bus);
	if (argc <= 1) {
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			return 1;
	}
	return 0;
}
