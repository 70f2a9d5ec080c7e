/*
 * bench_turn: one certificate renewal turn, timed whole, in process and
 * through tsec-broker.
 *
 *   build/release/bench_turn [TURNS]      (default 200)
 *
 * The calls an ACME client makes to renew one certificate: take the
 * renewal lock, check the three files exist, load them, save the new
 * certificate, key and metadata as one transaction, release the lock.
 * Gated: through the store (every call asks the policy first).  Ungated:
 * the same operations on the same backend through its interface, no
 * policy.  On the file backend (durable writes) and the memory backend
 * (where the policy's share shows).  Policy decisions per turn are
 * counted through the store's observer.  Then the same turn through
 * tsec-broker (file backend, its own folder) over ipc and over tcp with
 * CURVE, with the client library: lock.acquire, store.exists (three keys),
 * store.load_cert, store.save_cert (the three files as frames of their
 * own, each way), lock.release (5 calls, the same 11
 * decisions).
 *
 * CSV: case,sample,iterations,elapsed_ns,ns_per_op (one sample per
 * backend and side, iterations = turns) and latency rows
 * latency,case,samples,first,p50,p90,p99,p999,max.
 */
#include <pthread.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "tinysecurity/client.h"
#include "tinysecurity/store.h"
#include "broker/storage/backend.h"
#include "broker/storage/store_private.h"
#include "perf/benchutil.h"

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"issuer\", \"effect\": \"allow\","
	" \"principal\": [\"svc:acme-issuer\"], \"action\": [\"storage.*\", \"lock.*\"],"
	" \"resource\": [\"certificates/**\", \"locks/*\"], \"when\": {\"ttl_ms_max\": 600000}}]}";

static const char *keys[3] = {
	"certificates/acme/example.com/example.com.crt",
	"certificates/acme/example.com/example.com.key",
	"certificates/acme/example.com/example.com.json",
};

static struct tsec_principal issuer;
static unsigned long decisions;
static char cert[2048], key[300], meta[400];

static void count(void *ctx, void *call, const struct tsec_request *r,
		  const struct tsec_decision *d, size_t n, uint64_t ns)
{
	(void)ctx; (void)call; (void)r; (void)d; (void)ns;
	decisions += n;
}

static void die(const char *what, const struct tsec_error *err)
{
	fprintf(stderr, "bench_turn: %s: %s\n", what, err->msg);
	exit(2);
}

/*
 * Times one turn (first, alone) then `turns` more, and prints the case's
 * row and its latency row.  lat holds turns entries.
 */
static void timed(const char *name, int turns, uint64_t *lat, void (*turn)(void *), void *arg)
{
	uint64_t t0 = bench_now(), first, all;

	turn(arg);
	first = bench_now() - t0;
	all = bench_now();
	for (int i = 0; i < turns; i++) {
		t0 = bench_now();
		turn(arg);
		lat[i] = bench_now() - t0;
	}
	all = bench_now() - all;
	printf("%s,0,%d,%llu,%.1f\n", name, turns, (unsigned long long)all, (double)all / turns);
	printf("latency,");
	bench_print_latency(name, first, lat, (size_t)turns);
}

/* A gated turn through the store, for one name (its three keys). */
static void turn_named(struct tsec_store *s, const char *domain, const char *const *k)
{
	struct tsec_cert_files f = { cert, sizeof(cert), key, sizeof(key), meta, sizeof(meta) };
	struct tsec_cert_files got;
	struct tsec_error err;
	struct tsec_lock lk;
	int ex[3];

	if (tsec_lock_acquire(s, &issuer, domain, 60000, 10000, &lk, &err))
		die("lock", &err);
	if (tsec_store_exists_many(s, &issuer, k, 3, ex, &err))
		die("exists", &err);
	if (tsec_store_load_cert(s, &issuer, "acme", domain, &got, &err))
		die("load", &err);
	tsec_cert_files_free(&got);
	if (tsec_store_save_cert(s, &issuer, "acme", domain, &f, &err))
		die("save", &err);
	if (tsec_lock_release(s, &issuer, &lk, &err))
		die("release", &err);
}

static void turn_gated(void *arg)
{
	turn_named(arg, "example.com", keys);
}

/*
 * Renewals of different names at once: `callers` threads on one store,
 * each renewing its own name turn after turn, all started together;
 * the rate in turns per second, all of them.
 */
struct caller {
	struct tsec_store *s;
	pthread_barrier_t *go;
	int turns;
	char domain[32];
	char key[3][96];
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	const char *k[3] = { c->key[0], c->key[1], c->key[2] };

	pthread_barrier_wait(c->go);
	for (int i = 0; i < c->turns; i++)
		turn_named(c->s, c->domain, k);
	return NULL;
}

static double parallel_rate(struct tsec_store *s, int callers, int turns)
{
	struct caller *c = calloc((size_t)callers, sizeof(*c));
	pthread_t *th = calloc((size_t)callers, sizeof(*th));
	struct tsec_cert_files f = { cert, sizeof(cert), key, sizeof(key), meta, sizeof(meta) };
	pthread_barrier_t go;
	struct tsec_error err;
	uint64_t t0;

	if (!c || !th || pthread_barrier_init(&go, NULL, (unsigned)callers + 1))
		exit(2);
	for (int i = 0; i < callers; i++) {
		c[i] = (struct caller){ .s = s, .go = &go, .turns = turns / callers };
		snprintf(c[i].domain, sizeof(c[i].domain), "n%d.example.com", i);
		snprintf(c[i].key[0], sizeof(c[i].key[0]), "certificates/acme/%s/%s.crt",
			 c[i].domain, c[i].domain);
		snprintf(c[i].key[1], sizeof(c[i].key[1]), "certificates/acme/%s/%s.key",
			 c[i].domain, c[i].domain);
		snprintf(c[i].key[2], sizeof(c[i].key[2]), "certificates/acme/%s/%s.json",
			 c[i].domain, c[i].domain);
		/* Each name exists before its first turn, as at a renewal. */
		if (tsec_store_save_cert(s, &issuer, "acme", c[i].domain, &f, &err))
			die("seed", &err);
		if (pthread_create(&th[i], NULL, caller_main, &c[i]))
			exit(2);
	}
	pthread_barrier_wait(&go);
	t0 = bench_now();
	for (int i = 0; i < callers; i++)
		pthread_join(th[i], NULL);
	t0 = bench_now() - t0;
	pthread_barrier_destroy(&go);
	free(c);
	free(th);
	return (double)(turns / callers * callers) / ((double)t0 / 1e9);
}

/* This process's CPU time (user + system), in seconds. */
static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
 * One caller, then 16, renewing different names on a file store at
 * root (a disk folder, or tmpfs): each rate and the ratio, 16 / 1, and
 * how many cores each kept busy (CPU seconds over wall seconds): where
 * one caller already keeps a core busy, 16 can do no better than the
 * machine's cores over that.
 */
static void run_parallel(const char *name, const char *root, int turns, struct tsec_bus *bus)
{
	struct tsec_store_opts o = { .backend = "file", .root = root };
	struct tsec_store *s;
	struct tsec_error err;
	double one, many, c0, c1, c2;

	if (mkdir(root, 0700) && errno != EEXIST)
		return;
	if (tsec_store_open_opts(&s, &o, bus, NULL, &err))
		die("parallel open", &err);
	c0 = cpu_seconds();
	one = parallel_rate(s, 1, turns);
	c1 = cpu_seconds();
	many = parallel_rate(s, 16, turns);
	c2 = cpu_seconds();
	printf("# %s: 1 caller %.0f turns/s, 16 callers %.0f turns/s: %.2fx\n", name, one, many,
	       many / one);
	/* (CPU also counts the seeding of 1 and 16 names: under 1%) */
	printf("# %s: cores busy: 1 caller %.2f, 16 callers %.2f; CPU per turn %.0f / %.0f us; "
	       "%ld cores online\n", name, (c1 - c0) * one / (double)turns,
	       (c2 - c1) * many / (double)turns, (c1 - c0) / (double)turns * 1e6,
	       (c2 - c1) / (double)turns * 1e6, sysconf(_SC_NPROCESSORS_ONLN));
	printf("%s_1,0,%d,%.0f,%.1f\n", name, turns, turns / one * 1e9, 1e9 / one);
	printf("%s_16,0,%d,%.0f,%.1f\n", name, turns, turns / many * 1e9, 1e9 / many);
	tsec_store_close(&s);
}

/* The same operations on the backend itself: no key rules, no policy. */
struct ungated {
	struct tsec__backend *be;
	const struct tsec__skey *sk;
};

static void turn_ungated(void *arg)
{
	struct tsec__backend *be = ((struct ungated *)arg)->be;
	const struct tsec__skey *sk = ((struct ungated *)arg)->sk;
	const void *vals[3] = { cert, key, meta };
	const size_t lens[3] = { sizeof(cert), sizeof(key), sizeof(meta) };
	struct tsec__bput p[3];
	struct tsec__lease lease;
	struct tsec_error err;
	uint8_t me[16] = { 1 };
	int kind;

	/* Free at every turn's start: the one before released it. */
	if (be->ops->lock_try(be, "example.com", 60000, me, &lease, &err))
		die("lock_try", &err);
	for (int i = 0; i < 3; i++)
		if (be->ops->kind(be, &sk[i], &kind, &err))
			die("kind", &err);
	for (int i = 0; i < 3; i++) {
		char *v;
		size_t n;
		if (be->ops->get(be, &sk[i], 1 << 20, &v, &n, &err))
			die("get", &err);
		free(v);
	}
	for (int i = 0; i < 3; i++)
		p[i] = (struct tsec__bput){ &sk[i], vals[i], lens[i] };
	if (be->ops->put_many(be, p, 3, NULL, NULL, &err))
		die("put_many", &err);
	if (be->ops->lock_release(be, "example.com", lease.token, &err))
		die("release", &err);
}

static void run(const char *backend, const char *root, int turns, struct tsec_bus *bus)
{
	struct tsec_store_opts o = { .backend = backend, .root = root };
	struct tsec_store *s;
	struct tsec_error err;
	struct tsec__skey sk[3];
	uint64_t *lat = calloc((size_t)turns, sizeof(*lat));
	char name[64];

	if (!lat || tsec_store_open_opts(&s, &o, bus, NULL, &err))
		die("open", &err);
	tsec_store_set_observer(s, count, NULL);
	for (int i = 0; i < 3; i++)
		if (tsec__skey_parse(keys[i], false, &sk[i], &err))
			die("key", &err);
	/* The certificate exists before the first turn, as at a renewal. */
	{
		struct tsec__bput p[3] = { { &sk[0], cert, sizeof(cert) },
					   { &sk[1], key, sizeof(key) },
					   { &sk[2], meta, sizeof(meta) } };
		if (s->be->ops->put_many(s->be, p, 3, NULL, NULL, &err))
			die("seed", &err);
	}
	decisions = 0;
	snprintf(name, sizeof(name), "turn_gated_%s", backend);
	timed(name, turns, lat, turn_gated, s);
	printf("# %s: %.1f policy decisions per turn\n", name, (double)decisions / (turns + 1));
	snprintf(name, sizeof(name), "turn_ungated_%s", backend);
	timed(name, turns, lat, turn_ungated, &(struct ungated){ s->be, sk });
	tsec_store_close(&s);
	free(lat);
}

/* ---- through tsec-broker ---- */

static void client_turn(void *arg)
{
	struct tsec_client *c = arg;
	struct tsec_error err;
	char *res = NULL, p[512];
	const struct tsec_client_frame files[3] = { { cert, sizeof(cert) }, { key, sizeof(key) },
						    { meta, sizeof(meta) } };
	struct tsec_client_frame got[TSEC_CLIENT_MAX_FRAMES];
	size_t ngot;
	json_t *j;
	const char *tok;

	if (tsec_client_call(c, "lock.acquire", "{\"name\": \"example.com\", \"ttl_ms\": 60000,"
			     " \"timeout_ms\": 10000}", &res, &err))
		die("broker lock", &err);
	j = json_loads(res, 0, NULL);
	free(res);
	tok = json_string_value(json_object_get(j, "token"));
	/* The three files in one call, as the in-process turn's
	 * tsec_store_exists_many. */
	snprintf(p, sizeof(p), "{\"keys\": [\"%s\", \"%s\", \"%s\"]}", keys[0], keys[1],
		 keys[2]);
	if (tsec_client_call(c, "store.exists", p, NULL, &err))
		die("broker exists", &err);
	/* The files as frames of their own, each way: no JSON escaping. */
	if (tsec_client_call_frames(c, "store.load_cert", "{\"issuer\": \"acme\", \"domain\": "
				    "\"example.com\"}", NULL, 0, NULL, got, &ngot, &err) ||
	    ngot != 3)
		die("broker load", &err);
	tsec_client_frames_free(got, ngot);
	if (tsec_client_call_frames(c, "store.save_cert", "{\"issuer\": \"acme\", \"domain\": "
				    "\"example.com\", \"cert_frame\": 1, \"key_frame\": 2, "
				    "\"meta_frame\": 3}", files, 3, NULL, NULL, NULL, &err))
		die("broker save", &err);
	snprintf(p, sizeof(p), "{\"name\": \"example.com\", \"token\": \"%s\"}", tok);
	if (tsec_client_call(c, "lock.release", p, NULL, &err))
		die("broker release", &err);
	json_decref(j);
}

/*
 * The broker's turn beside the same turn in process, interleaved (one of
 * each in turn, the order swapped every other pair: A B B A), so that the
 * disk's moods fall on both alike: fsync time moves by 2x within a run
 * here, and two cases timed one after the other compare the disk's
 * moments as much as the code.  Prints both latency rows and the ratio
 * of the medians.
 */
static void side_by_side(const char *root, struct tsec_bus *bus, struct tsec_client *c,
			 int turns, void (*broker_turn)(void *), const char *label)
{
	struct tsec_store_opts o = { .backend = "file", .root = root };
	struct tsec_cert_files f = { cert, sizeof(cert), key, sizeof(key), meta, sizeof(meta) };
	uint64_t *a = calloc((size_t)turns, sizeof(*a)), *b = calloc((size_t)turns, sizeof(*b));
	uint64_t t0, fa, fb, ma, mb;
	struct tsec_store *s;
	struct tsec_error err;

	if (!a || !b || tsec_store_open_opts(&s, &o, bus, NULL, &err) ||
	    tsec_store_save_cert(s, &issuer, "acme", "example.com", &f, &err))
		die("side by side", &err);
	t0 = bench_now();
	turn_gated(s);
	fa = bench_now() - t0;
	t0 = bench_now();
	broker_turn(c);
	fb = bench_now() - t0;
	for (int i = 0; i < turns; i++) {
		for (int k = 0; k < 2; k++) {
			bool broker = (k == 0) == (i % 2 == 1);

			t0 = bench_now();
			if (broker)
				broker_turn(c);
			else
				turn_gated(s);
			(broker ? b : a)[i] = bench_now() - t0;
		}
	}
	{
		char na[96], nb[96];

		snprintf(na, sizeof(na), "turn_side_by_side_%s_inproc_file", label);
		snprintf(nb, sizeof(nb), "turn_side_by_side_%s_broker_ipc_file", label);
		printf("latency,");
		bench_print_latency(na, fa, a, (size_t)turns);
		printf("latency,");
		bench_print_latency(nb, fb, b, (size_t)turns);
	}
	ma = bench_quantile(a, (size_t)turns, 0.5);
	mb = bench_quantile(b, (size_t)turns, 0.5);
	printf("# side by side (%s), interleaved: broker/in-process p50 %.2f (%.2f / %.2f ms)\n",
	       label, (double)mb / (double)ma, mb / 1e6, ma / 1e6);
	tsec_store_close(&s);
	free(a);
	free(b);
}

/*
 * The same turn in two round trips: "batch" (docs/operations.md) with
 * lock.acquire, store.exists and store.load_cert, then one with
 * store.save_cert and lock.release.
 */
static void client_turn_batched(void *arg)
{
	struct tsec_client *c = arg;
	const struct tsec_client_frame files[3] = { { cert, sizeof(cert) }, { key, sizeof(key) },
						    { meta, sizeof(meta) } };
	struct tsec_client_frame got[TSEC_CLIENT_MAX_FRAMES];
	struct tsec_error err;
	char *res = NULL, p[1024];
	json_t *j, *r;
	const char *tok;
	size_t ngot, i;

	snprintf(p, sizeof(p), "{\"calls\": [{\"method\": \"lock.acquire\", \"params\": {\"name\":"
		 " \"example.com\", \"ttl_ms\": 60000, \"timeout_ms\": 10000, \"deadline_ms\":"
		 " 20000}}, {\"method\": \"store.exists\", \"params\": {\"keys\": [\"%s\", \"%s\","
		 " \"%s\"]}}, {\"method\": \"store.load_cert\", \"params\": {\"issuer\": \"acme\","
		 " \"domain\": \"example.com\"}}]}", keys[0], keys[1], keys[2]);
	if (tsec_client_call_frames(c, "batch", p, NULL, 0, &res, got, &ngot, &err) || ngot != 3)
		die("broker batch 1", &err);
	tsec_client_frames_free(got, ngot);
	j = json_loads(res, 0, NULL);
	free(res);
	json_array_foreach(json_object_get(j, "results"), i, r)
		if (json_object_get(r, "error"))
			die("broker batch 1", &(struct tsec_error){ .msg = "a call failed" });
	tok = json_string_value(json_object_get(json_object_get(
		json_array_get(json_object_get(j, "results"), 0), "result"), "token"));
	if (!tok || json_array_size(json_object_get(j, "results")) != 3)
		die("broker batch 1", &(struct tsec_error){ .msg = "no token" });
	snprintf(p, sizeof(p), "{\"calls\": [{\"method\": \"store.save_cert\", \"params\":"
		 " {\"issuer\": \"acme\", \"domain\": \"example.com\", \"cert_frame\": 1,"
		 " \"key_frame\": 2, \"meta_frame\": 3}}, {\"method\": \"lock.release\","
		 " \"params\": {\"name\": \"example.com\", \"token\": \"%s\"}}]}", tok);
	json_decref(j);
	if (tsec_client_call_frames(c, "batch", p, files, 3, &res, NULL, NULL, &err))
		die("broker batch 2", &err);
	if (strstr(res, "\"error\""))
		die("broker batch 2", &(struct tsec_error){ .msg = "a call failed" });
	free(res);
}

static void run_broker(const char *root, int turns, struct tsec_bus *bus)
{
	char dir[256], cfg[4096], path[300], ipc[320], tcp[64], pol[300], blog[300];
	char srv_pub[41], srv_sec[41], cli_pub[41], cli_sec[41];
	uint64_t *lat = calloc((size_t)turns, sizeof(*lat));
	struct tsec_error err;
	FILE *f;
	pid_t pid;

	snprintf(dir, sizeof(dir), "%s/broker", root);
	mkdir(dir, 0700);
	snprintf(pol, sizeof(pol), "%s/policy.json", dir);
	if (!(f = fopen(pol, "w")))
		exit(2);
	fputs(policy, f);
	fclose(f);
	zmq_curve_keypair(srv_pub, srv_sec);
	zmq_curve_keypair(cli_pub, cli_sec);
	snprintf(ipc, sizeof(ipc), "ipc://%s/tsec.sock", dir);
	snprintf(tcp, sizeof(tcp), "tcp://127.0.0.1:%d", bench_free_port());
	snprintf(cfg, sizeof(cfg),
		 "{\"module\": \"%s\", \"policy\": \"%s\","
		 " \"allow_unsigned_policy\": true, \"storage\": \"%s/store\","
		 " \"endpoints\": [\"%s\", \"%s\"], \"server_secret_key\": \"%s\","
		 " \"clients\": [{\"public_key\": \"%s\", \"principal\": \"svc:acme-issuer\"}],"
		 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:acme-issuer\"}]}",
		 bench_module(), pol, dir, ipc, tcp, srv_sec, cli_pub, (int)getuid());
	snprintf(path, sizeof(path), "%s/broker.json", dir);
	if (!lat || !(f = fopen(path, "w")) || fchmod(fileno(f), 0600))
		exit(2);
	fputs(cfg, f);
	fclose(f);
	snprintf(blog, sizeof(blog), "%s/broker.log", dir);
	pid = bench_broker_start(path, ipc, blog);
	/* BENCH_SIDES=ipc: the ipc side only (perf/turn_instructions.sh). */
	for (int side = 0; side < (getenv("BENCH_SIDES") && !strcmp(getenv("BENCH_SIDES"), "ipc")
				   ? 1 : 2); side++) {
		struct tsec_client_opts o = { .endpoint = side ? tcp : ipc, .timeout_ms = 20000,
					      .server_public_key = side ? srv_pub : NULL,
					      .public_key = side ? cli_pub : NULL,
					      .secret_key = side ? cli_sec : NULL };
		struct tsec_client *c;
		char name[64];

		if (tsec_client_open(&c, &o, &err))
			die("client", &err);
		/* The certificate exists before the first turn. */
		{
			json_t *seed = json_pack("{s:s,s:s,s:s%,s:s%,s:s%}", "issuer", "acme", "domain",
						 "example.com", "cert", cert, sizeof(cert), "key", key,
						 sizeof(key), "meta", meta, sizeof(meta));
			char *txt = json_dumps(seed, JSON_COMPACT);

			json_decref(seed);
			if (tsec_client_call(c, "store.save_cert", txt, NULL, &err))
				die("seed", &err);
			free(txt);
		}
		snprintf(name, sizeof(name), "turn_broker_%s_file", side ? "tcp_curve" : "ipc");
		timed(name, turns, lat, client_turn, c);
		if (!side && !getenv("BENCH_SIDES")) {
			char sb[300];

			snprintf(sb, sizeof(sb), "%s/side-by-side", root);
			side_by_side(sb, bus, c, turns, client_turn, "5_calls");
			side_by_side(sb, bus, c, turns, client_turn_batched, "2_batches");
		}
		tsec_client_close(&c);
	}
	if (bench_broker_stop(pid))
		exit(2);
	free(lat);
}

/* The benchmark's folder, removed at any exit (after benchutil.c has
 * stopped any broker still running in it). */
static char turn_root[64];
static pid_t turn_owner;

static void remove_root(void)
{
	char cmd[96];

	if (turn_root[0] && getpid() == turn_owner) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", turn_root);
		if (system(cmd) != 0)
			fprintf(stderr, "bench_turn: cannot remove %s\n", turn_root);
	}
}

int main(int argc, char **argv)
{
	int turns = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 200;
	char root[] = "/tmp/tsec-turn-XXXXXX", cmd[96];
	struct tsec_bus *bus;
	struct tsec_error err;

	issuer.id = tsec_str_c("svc:acme-issuer");
	memset(cert, 'c', sizeof(cert));
	memset(key, 'k', sizeof(key));
	memset(meta, 'm', sizeof(meta));
	if (!mkdtemp(root) || tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", bench_module(), policy,
			  strlen(policy), &err)) {
		fprintf(stderr, "bench_turn: cannot start\n");
		return 2;
	}
	snprintf(turn_root, sizeof(turn_root), "%s", root);
	turn_owner = getpid();
	atexit(remove_root);
	printf("# bench_turn: %s build, %d renewal turns per case\n",
	       tsec_build_name(TSEC_BUILD_THIS), turns);
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	/* BENCH_ONLY=memory: that case alone (for callgrind's counts). */
	if (!getenv("BENCH_ONLY") || !strcmp(getenv("BENCH_ONLY"), "file"))
		run("file", root, turns, bus);
	if (!getenv("BENCH_ONLY") || !strcmp(getenv("BENCH_ONLY"), "memory"))
		run("memory", NULL, turns * 10, bus);
	if (!getenv("BENCH_ONLY") || !strcmp(getenv("BENCH_ONLY"), "broker"))
		run_broker(root, turns, bus);
	/* BENCH_ONLY=parallel: renewals of 16 names at once against one
	 * (at least 16 turns; on the disk's folder and on tmpfs). */
	if (!getenv("BENCH_ONLY") || !strcmp(getenv("BENCH_ONLY"), "parallel")) {
		char disk[300], shm[] = "/dev/shm/tsec-turn-XXXXXX";
		int pt = turns < 16 ? 16 : turns;

		snprintf(disk, sizeof(disk), "%s/parallel", root);
		if (!getenv("BENCH_TMPFS_ONLY"))
			run_parallel("turn_parallel_file", disk, pt, bus);
		if (mkdtemp(shm)) {
			run_parallel("turn_parallel_tmpfs", shm, pt, bus);
			snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shm);
			if (system(cmd) != 0)
				return 1;
		}
	}
	tsec_bus_free(&bus);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : 1;
}
