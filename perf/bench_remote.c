/*
 * bench_remote: the remote certificate store's Load, Presence and
 * Republish, at 6 KiB and 48 KiB payloads.
 *
 *   build/release/bench_remote [N]        (N operations per sample; 10000)
 *
 * First against the memory coordinator and the copying in-memory blob
 * provider, so the figure is this library's local processing (policy
 * check, references, blob verification, sealing): load_6k, presence_6k,
 * republish_6k and the same at 48k.  Beside them, in the same run, the
 * baseline without a remote store: store_load_cert_6k/_48k, the memory
 * store's tsec_store_load_cert of the same three files (the policy check
 * and three reads, no blob verification).
 *
 * Then the real path through an S3-compatible server (s3rver, started
 * here on loopback, stopped at the end; BENCH_S3=0 skips it): s3_load_6k
 * and so on, with BENCH_S3_ITERS operations per sample (default 300: each
 * is an HTTP round trip to node).
 *
 * A payload of P is a certificate chain of P/2, a key of P/8 and
 * metadata making up the rest.  BENCH_SAMPLES samples (5), each after
 * 500 warm-up operations (5% of N at most); BENCH_ONLY=6k or 48k runs
 * one size.  CSV: case,sample,
 * iterations,elapsed_ns,ns_per_op (perf/abba.sh reads it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tinysecurity/remote.h"
#include "perf/benchutil.h"
#include "tests/servers.h"

static const char *policy =
	"{\"version\": 1, \"rules\": [{\"id\": \"app\", \"effect\": \"allow\","
	" \"principal\": [\"svc:app\"], \"action\": [\"storage.*\", \"cert.*\"],"
	" \"resource\": [\"certificates/**\"]}]}";

static struct tsec_principal app;
static int N = 10000, SAMPLES = 5;

static void die(const char *what, const struct tsec_error *err)
{
	fprintf(stderr, "bench_remote: %s: %s\n", what, err ? err->msg : "failed");
	exit(2);
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && atoi(v) > 0 ? atoi(v) : dflt;
}

/* Three files making up `total` bytes (PEM-looking text). */
static void payload(struct tsec_cert_files *f, size_t total, char tag)
{
	size_t c = total / 2, k = total / 8, m = total - c - k;

	f->cert = malloc(c + 1);
	f->key = malloc(k + 1);
	f->meta = malloc(m + 1);
	if (!f->cert || !f->key || !f->meta)
		die("malloc", NULL);
	memset(f->cert, 'C', c);
	memset(f->key, 'K', k);
	memset(f->meta, ' ', m);
	f->cert[0] = f->key[0] = tag;
	f->meta[0] = '{';
	f->meta[m - 1] = '}';
	f->cert[c] = f->key[k] = f->meta[m] = 0;
	f->cert_len = c;
	f->key_len = k;
	f->meta_len = m;
}

enum op { LOAD, PRESENCE, REPUBLISH, BASE_LOAD };

static void run(const char *label, struct tsec_remote *r, struct tsec_store *s, enum op op,
		const char *issuer, const char *domain, const struct tsec_cert_files *f, int n)
{
	struct tsec_error err;
	int warm = n / 20 < 500 ? n / 20 : 500;

	for (int sample = -1; sample < SAMPLES; sample++) {
		int iters = sample < 0 ? warm : n;
		uint64_t t0 = bench_now(), el;

		for (int i = 0; i < iters; i++) {
			struct tsec_cert_files got;
			enum tsec_remote_outcome oc;
			int ex, rc = 0;

			switch (op) {
			case LOAD:
				if (!(rc = tsec_remote_load(r, &app, issuer, domain, &got, &err)))
					tsec_cert_files_free(&got);
				break;
			case PRESENCE:
				rc = tsec_remote_exists(r, &app, issuer, domain, &ex, &err);
				if (!rc && !ex)
					die("presence", NULL);
				break;
			case REPUBLISH:
				rc = tsec_remote_publish(r, &app, NULL, issuer, domain, f, &oc, &err);
				if (!rc && oc != TSEC_REMOTE_UNCHANGED)
					die("republish changed something", NULL);
				break;
			case BASE_LOAD:
				if (!(rc = tsec_store_load_cert(s, &app, issuer, domain, &got, &err)))
					tsec_cert_files_free(&got);
				break;
			}
			if (rc)
				die(label, &err);
		}
		el = bench_now() - t0;
		if (sample >= 0)
			printf("%s,%d,%d,%llu,%.1f\n", label, sample, iters, (unsigned long long)el,
			       (double)el / iters);
	}
	fflush(stdout);
}

static void cases(const char *prefix, struct tsec_remote *r, struct tsec_store *s, int n,
		  int with_baseline)
{
	static const size_t sizes[2] = { 6 * 1024, 48 * 1024 };
	static const char *const tags[2] = { "6k", "48k" };

	for (int i = 0; i < 2; i++) {
		const char *only = getenv("BENCH_ONLY");
		struct tsec_cert_files f;
		struct tsec_error err;
		char domain[32], label[64];

		if (only && *only && strcmp(only, tags[i]))
			continue;
		snprintf(domain, sizeof(domain), "%s.example", tags[i]);
		payload(&f, sizes[i], (char)('a' + i));
		if (tsec_remote_publish(r, &app, NULL, "acme", domain, &f, NULL, &err))
			die("publish", &err);
		snprintf(label, sizeof(label), "%sload_%s", prefix, tags[i]);
		run(label, r, s, LOAD, "acme", domain, &f, n);
		snprintf(label, sizeof(label), "%spresence_%s", prefix, tags[i]);
		run(label, r, s, PRESENCE, "acme", domain, &f, n);
		snprintf(label, sizeof(label), "%srepublish_%s", prefix, tags[i]);
		run(label, r, s, REPUBLISH, "acme", domain, &f, n);
		if (with_baseline) {
			/* The same three files stored whole, read back whole. */
			if (tsec_store_save_cert(s, &app, "plain", domain, &f, &err))
				die("save_cert", &err);
			snprintf(label, sizeof(label), "store_load_cert_%s", tags[i]);
			run(label, r, s, BASE_LOAD, "plain", domain, &f, n);
		}
		tsec_cert_files_free(&f);
	}
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f) || chmod(path, 0600))
		die(path, NULL);
}

int main(int argc, char **argv)
{
	struct tsec_bus *bus;
	struct tsec_store *s;
	struct tsec_remote *r;
	struct tsec_error err;
	struct tsec_store_opts so = { .backend = "memory" };
	struct tsec_remote_opts ro = { .blobs = "memory:" };
	char dir[] = "/tmp/tsec-bench-remote-XXXXXX", keyfile[96], secret[96];

	if (argc > 1)
		N = atoi(argv[1]) > 0 ? atoi(argv[1]) : N;
	SAMPLES = env_int("BENCH_SAMPLES", SAMPLES);
	app.id = tsec_str_c("svc:app");
	if (!mkdtemp(dir))
		die("mkdtemp", NULL);
	snprintf(keyfile, sizeof(keyfile), "%s/remote.key", dir);
	write_file(keyfile, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
	ro.key_file = keyfile;
	if (tsec_bus_new(&bus) ||
	    tsec_bus_load(bus, "policy", bench_module(), policy, strlen(policy), &err) ||
	    tsec_store_open_opts(&s, &so, bus, NULL, &err) || tsec_remote_open(&r, s, &ro, &err))
		die("open", &err);
	printf("# bench_remote: %s build, %d operations per sample, %d samples; memory "
	       "coordinator, memory blobs\n", tsec_build_name(TSEC_BUILD_THIS), N, SAMPLES);
	printf("case,sample,iterations,elapsed_ns,ns_per_op\n");
	cases("", r, s, N, 1);
	tsec_remote_close(&r);
	if (!getenv("BENCH_S3") || strcmp(getenv("BENCH_S3"), "0")) {
		struct tu_server s3;
		int n3 = env_int("BENCH_S3_ITERS", N < 300 ? N : 300);

		if (tu_s3_start(&s3))
			die("cannot start s3rver (scripts/deps.sh servers installs it; BENCH_S3=0 "
			    "skips the S3 cases)", NULL);
		snprintf(secret, sizeof(secret), "%s/s3.secret", dir);
		write_file(secret, "S3RVER\n");
		ro.blobs = "s3://tsec-test/bench";
		ro.s3_endpoint = s3.url[0];
		ro.s3_access_key = "S3RVER";
		ro.s3_secret_file = secret;
		if (tsec_remote_open(&r, s, &ro, &err))
			die("s3 open", &err);
		printf("# through s3rver on loopback, %d operations per sample\n", n3);
		cases("s3_", r, s, n3, 0);
		tsec_remote_close(&r);
		tu_server_stop(&s3);
	}
	tsec_store_close(&s);
	tsec_bus_free(&bus);
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "bench_remote: could not remove %s\n", dir);
	}
	return 0;
}
