/*
 * Several brokers over one etcd: a lock handle works through any of
 * them; a client with both endpoints fails over when one is killed in
 * the middle of a run, and every call gets an answer; one signed policy
 * published through one broker is loaded by the other, an older one is
 * refused, and a bundle planted in etcd without the signing key is
 * refused by every broker; a broker stopped with SIGTERM leaves the locks
 * it handed out to the other.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/client.h"

#define POLICY_FMT \
	"{\"revision\": %d, \"version\": 1,\n" \
	" \"rules\": [{\"id\": \"r%d\", \"effect\": \"allow\", \"principal\": [\"svc:app\"],\n" \
	"   \"action\": [\"*\"], \"resource\": [\"**\"]}]}\n"

static struct {
	struct tu_server etcd;
	char dir[64], policy[128], ipc[4][160], cfg[4][128], err[4][128];
	unsigned char pk[32], sk[64];
	pid_t pid[4];
	bool fast[4];                    /* its wall clock an hour ahead (libfaketime) */
} F;

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Policy text of revision rev, and its signature (hex, 129 bytes). */
static char *signed_policy(int rev, char sig[129])
{
	unsigned char s[64];
	char *text;

	assert_true(asprintf(&text, POLICY_FMT, rev, rev) > 0);
	crypto_sign_detached(s, NULL, (unsigned char *)text, strlen(text), F.sk);
	sodium_bin2hex(sig, 129, s, sizeof(s));
	return text;
}

/* The publish bundle {"policy", "signature"} as text; frees text. */
static char *bundle_of(char *text, const char *sig)
{
	json_t *r = json_pack("{s:s,s:s}", "policy", text, "signature", sig);
	char *b = json_dumps(r, JSON_COMPACT);

	json_decref(r);
	free(text);
	assert_non_null(b);
	return b;
}

static struct tsec_client *client_of(int which, int timeout_ms)
{
	struct tsec_client_opts o = { .timeout_ms = timeout_ms };
	struct tsec_client_endpoint eps[2] = { { F.ipc[0], NULL }, { F.ipc[1], NULL } };
	struct tsec_client *c;
	struct tsec_error err;

	if (which < 0) {                 /* both, failing over */
		o.endpoints = eps;
		o.nendpoints = 2;
		o.attempt_ms = 500;
	} else {
		o.endpoint = F.ipc[which];
	}
	assert_int_equal(tsec_client_open(&c, &o, &err), 0);
	return c;
}

static json_t *call(int which, const char *method, const char *params, int *rc)
{
	struct tsec_client *c = client_of(which, 5000);
	struct tsec_error err;
	char *res = NULL;
	json_t *j;

	*rc = tsec_client_call(c, method, params, &res, &err);
	tsec_client_close(&c);
	j = res ? json_loads(res, 0, NULL) : NULL;
	free(res);
	return j;
}

static void start_broker(int i)
{
	pid_t parent = getpid();

	F.pid[i] = fork();
	assert_true(F.pid[i] >= 0);
	if (F.pid[i] == 0) {
		tu_child_dies_with(parent);
		FILE *e = freopen(F.err[i], "w", stderr);
		(void)e;
		if (F.fast[i]) {
			/* The wall clock only: the monotonic and boot clocks are
			 * the machine's, as they are on a machine set wrong. */
			const char *asan = getenv("ASAN_OPTIONS");
			char opts[512];

			snprintf(opts, sizeof(opts), "%s%sverify_asan_link_order=0", asan ? asan : "",
				 asan ? ":" : "");
			setenv("ASAN_OPTIONS", opts, 1);
			setenv("LD_PRELOAD", FAKETIME_LIB, 1);
			setenv("FAKETIME", "+1h", 1);
			setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
		}
		execl(TSEC_BUILD_DIR "/tsec-broker", "tsec-broker", "--config", F.cfg[i], (char *)NULL);
		_exit(127);
	}
	for (int t = 0; t < 200; t++) {
		struct tsec_client *c = client_of(i, t < 50 ? 50 : 500);
		struct tsec_error err;
		int rc = tsec_client_call(c, "health", NULL, NULL, &err);

		tsec_client_close(&c);
		if (rc == 0)
			return;
	}
	{
		char cmd[200];
		snprintf(cmd, sizeof(cmd), "tail -5 '%s' >&2", F.err[i]);
		if (system(cmd))
			fprintf(stderr, "(no log)\n");
	}
	fail_msg("tsec-broker %d did not come up", i);
}

static void stop_broker(int i, int sig)
{
	if (F.pid[i] > 0) {
		kill(F.pid[i], sig);
		waitpid(F.pid[i], NULL, 0);
		F.pid[i] = 0;
	}
}

static char pkhex[65];

static void broker_cfg(int i, const char *etcd_eps, char *cfg, size_t cap)
{
	snprintf(cfg, cap,
		 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
		 " \"policy_public_key\": \"%s\", \"state_dir\": \"%s/state%d\","
		 " \"storage\": {\"backend\": \"etcd\", \"endpoints\": [\"%s\"],"
		 "               \"prefix\": \"fleet\", \"timeout_ms\": 2000},"
		 " \"endpoints\": [\"%s\"],"
		 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:app\", \"admin\": true}]}",
		 TSEC_BUILD_DIR, F.policy, pkhex, F.dir, i, etcd_eps, F.ipc[i], (int)getuid());
}

static int setup(void **state)
{
	char sig[129], *text;
	(void)state;

	if (sodium_init() < 0 || tu_etcd_start(&F.etcd, 1))
		return -1;
	snprintf(F.dir, sizeof(F.dir), "/tmp/tsec-brokers-XXXXXX");
	if (!mkdtemp(F.dir))
		return -1;
	crypto_sign_keypair(F.pk, F.sk);
	sodium_bin2hex(pkhex, sizeof(pkhex), F.pk, 32);
	snprintf(F.policy, sizeof(F.policy), "%s/policy.json", F.dir);
	text = signed_policy(1, sig);
	write_file(F.policy, text);
	free(text);
	{
		char p[160];
		snprintf(p, sizeof(p), "%s.sig", F.policy);
		write_file(p, sig);
	}
	for (int i = 0; i < 2; i++) {
		char cfg[2048], state_dir[128], mk[160];

		snprintf(state_dir, sizeof(state_dir), "%s/state%d", F.dir, i);
		snprintf(mk, sizeof(mk), "mkdir -p %s", state_dir);
		if (system(mk))
			return -1;
		snprintf(F.ipc[i], sizeof(F.ipc[i]), "ipc://%s/b%d.sock", F.dir, i);
		snprintf(F.cfg[i], sizeof(F.cfg[i]), "%s/broker%d.json", F.dir, i);
		snprintf(F.err[i], sizeof(F.err[i]), "%s/broker%d.err", F.dir, i);
		broker_cfg(i, F.etcd.endpoints, cfg, sizeof(cfg));
		write_file(F.cfg[i], cfg);
		start_broker(i);
	}
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;

	for (int i = 0; i < 4; i++)
		stop_broker(i, SIGTERM);
	tu_server_stop(&F.etcd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", F.dir);
	return system(cmd) ? -1 : 0;
}

/* Stops the brokers a test started in slots 2 and 3, passed or failed,
 * so that a failure does not leave one running for the next test. */
static int stop_extra(void **state)
{
	(void)state;
	stop_broker(2, SIGTERM);
	stop_broker(3, SIGTERM);
	return 0;
}

/* --check says whether the shared backend answers. */
static void test_check_reaches_the_backend(void **state)
{
	char cmd[512], dead[160], text[2048];

	(void)state;
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/tsec-broker --config %s --check 2>&1 | "
		 "grep -q 'storage etcd at .*reachable'", F.cfg[1]);
	assert_int_equal(system(cmd), 0);
	/* The same broker with an etcd nobody runs: exit 2, and why. */
	snprintf(dead, sizeof(dead), "%s/dead.json", F.dir);
	broker_cfg(1, "http://127.0.0.1:1", text, sizeof(text));
	write_file(dead, text);
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/tsec-broker --config %s --check "
		 ">%s/dead.out 2>&1", dead, F.dir);
	assert_int_equal(WEXITSTATUS(system(cmd)), 2);
	snprintf(cmd, sizeof(cmd), "grep -q 'storage etcd at http://127.0.0.1:1: etcd at' %s/dead.out",
		 F.dir);
	assert_int_equal(system(cmd), 0);
}

static void test_lock_through_either_broker(void **state)
{
	json_t *lk, *r;
	char *p;
	int rc;

	(void)state;
	lk = call(0, "lock.acquire", "{\"name\": \"renewal\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, 0);
	assert_true(asprintf(&p, "{\"name\": \"renewal\", \"token\": \"%s\", \"ttl_ms\": 60000}",
			     json_string_value(json_object_get(lk, "token"))) > 0);
	/* The other broker renews and releases what the first handed out. */
	r = call(1, "lock.renew", p, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	r = call(1, "lock.acquire", "{\"name\": \"renewal\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, TSEC_EBUSY);
	json_decref(r);
	r = call(1, "lock.release", p, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	free(p);
	json_decref(lk);
}

static long revision_at(int which)
{
	int rc;
	json_t *h = call(which, "health", NULL, &rc);
	long v = rc ? -1 : (long)json_integer_value(json_object_get(h, "policy_revision"));

	json_decref(h);
	return v;
}

static const char *status_at(int which, char *buf, size_t cap)
{
	int rc;
	json_t *h = call(which, "health", NULL, &rc);

	snprintf(buf, cap, "%s", rc ? "none" : json_string_value(json_object_get(h, "status")));
	json_decref(h);
	return buf;
}

/* `tsec health`'s exit status against broker `which` (issue 37, item
 * 6: 0 when "ok", 1 when degraded; it was 0 for both). */
static int tsec_health_exit(int which)
{
	char cmd[512];
	int st;

	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/tsec --endpoint %s health >/dev/null 2>&1",
		 F.ipc[which]);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_fleet_policy(void **state)
{
	char sig[129], *text, *params;
	struct tsec_error err;
	json_t *r;
	int rc;

	(void)state;
	assert_int_equal(revision_at(0), 1);
	assert_int_equal(revision_at(1), 1);
	{
		char st[32];

		TU_WAIT(!strcmp(status_at(0, st, sizeof(st)), "ok"));
		assert_int_equal(tsec_health_exit(0), 0);
	}
	/* Published through broker 0; broker 1 loads it (it looks each second). */
	params = bundle_of(signed_policy(2, sig), sig);
	r = call(0, "policy.publish", params, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(json_integer_value(json_object_get(r, "policy_revision")), 2);
	json_decref(r);
	free(params);
	assert_int_equal(revision_at(0), 2);
	TU_WAIT(revision_at(1) == 2);
	assert_int_equal(revision_at(1), 2);
	/* An older revision, correctly signed, is refused (no rollback). */
	params = bundle_of(signed_policy(1, sig), sig);
	r = call(1, "policy.publish", params, &rc);
	assert_int_equal(rc, TSEC_EROLLBACK);
	json_decref(r);
	free(params);
	/* Write access to etcd alone cannot change the policy: a bundle of
	 * revision 9 signed with another key, planted directly. */
	{
		struct tsec_store_opts o = { .backend = "etcd", .endpoints = F.etcd.endpoints,
					     .prefix = "fleet" };
		unsigned char pk2[32], sk2[64], s[64];
		struct tu_store t;
		char *bundle;

		crypto_sign_keypair(pk2, sk2);
		assert_true(asprintf(&text, POLICY_FMT, 9, 9) > 0);
		crypto_sign_detached(s, NULL, (unsigned char *)text, strlen(text), sk2);
		sodium_bin2hex(sig, sizeof(sig), s, sizeof(s));
		bundle = bundle_of(text, sig);
		tu_store_open_with(&t, &o);
		assert_int_equal(tsec__store_record_put(t.store, "policy", bundle, strlen(bundle), &err), 0);
		free(bundle);
		/* Both brokers have read it and refused it: each says so in
		 * its health. */
		char st[32];
		TU_WAIT(!strcmp(status_at(0, st, sizeof(st)), "degraded") &&
			!strcmp(status_at(1, st, sizeof(st)), "degraded"));
		assert_string_equal(status_at(0, st, sizeof(st)), "degraded");
		assert_string_equal(status_at(1, st, sizeof(st)), "degraded");
		assert_int_equal(tsec_health_exit(0), 1);
		assert_int_equal(revision_at(0), 2);
		assert_int_equal(revision_at(1), 2);
		tu_store_close(&t);
	}
}

/* Signs text (consumed) into a publish bundle. */
static char *signed_bundle(char *text)
{
	unsigned char s[64];
	char sig[129];

	crypto_sign_detached(s, NULL, (unsigned char *)text, strlen(text), F.sk);
	sodium_bin2hex(sig, sizeof(sig), s, sizeof(s));
	return bundle_of(text, sig);
}

/* tsec-broker --check on config text; its exit status, its output in out. */
static int check_with(const char *cfg_text, const char *state_file, char *out, size_t cap)
{
	char path[160], cmd[512], sd[160];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/check.json", F.dir);
	write_file(path, cfg_text);
	snprintf(sd, sizeof(sd), "%s/state-check", F.dir);
	snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", sd, sd);
	assert_int_equal(system(cmd), 0);
	if (state_file) {
		snprintf(cmd, sizeof(cmd), "%s/.tsec-policy-revision", sd);
		write_file(cmd, state_file);
	}
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/tsec-broker --config %s --check >%s/check.out "
		 "2>&1", path, F.dir);
	n = (size_t)WEXITSTATUS(system(cmd));
	snprintf(cmd, sizeof(cmd), "%s/check.out", F.dir);
	f = fopen(cmd, "r");
	assert_non_null(f);
	out[fread(out, 1, cap - 1, f)] = '\0';
	fclose(f);
	return (int)n;
}

/*
 * Issue 17, defect 11: a planted or replayed bundle turns health
 * "degraded" (it said "ok"); an expired bundle is refused; a broker with
 * a fleet_id takes only its fleet's; a damaged revision file refuses to
 * start instead of starting on any revision.
 */
static void test_fleet_binding_and_freshness(void **state)
{
	char st[32], out[8192], *text, *params;
	json_t *r;
	int rc;

	(void)state;
	/* test_fleet_policy left a bundle in etcd no broker accepts. */
	/* Each broker says so when its own watch has read it: both waited for. */
	TU_WAIT(!strcmp(status_at(0, st, sizeof(st)), "degraded") &&
		!strcmp(status_at(1, st, sizeof(st)), "degraded"));
	assert_string_equal(status_at(0, st, sizeof(st)), "degraded");
	assert_string_equal(status_at(1, st, sizeof(st)), "degraded");
	/* Expired: refused at publish. */
	assert_true(asprintf(&text, "{\"revision\": 3, \"version\": 1, \"expires\": "
			     "\"2020-01-01T00:00:00Z\", \"rules\": []}") > 0);
	params = signed_bundle(text);
	r = call(0, "policy.publish", params, &rc);
	assert_int_equal(rc, TSEC_ESIGNATURE);
	json_decref(r);
	free(params);
	/* A good one with an expiry far ahead: served, both brokers ok. */
	assert_true(asprintf(&text, POLICY_FMT, 3, 3) > 0);
	text[0] = ' ';           /* '{' -> ' ', then the expiry before it */
	{
		char *t2;
		assert_true(asprintf(&t2, "{\"expires\": \"2099-01-01T00:00:00Z\",%s", text) > 0);
		free(text);
		text = t2;
	}
	params = signed_bundle(text);
	r = call(0, "policy.publish", params, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	free(params);
	TU_WAIT(revision_at(1) == 3);
	assert_int_equal(revision_at(1), 3);
	/* The publisher too is ok only once its watch has read the bundle
	 * back (CI once saw it still degraded when broker 1 was ok). */
	TU_WAIT(!strcmp(status_at(0, st, sizeof(st)), "ok") &&
		!strcmp(status_at(1, st, sizeof(st)), "ok"));
	assert_string_equal(status_at(0, st, sizeof(st)), "ok");
	assert_string_equal(status_at(1, st, sizeof(st)), "ok");
	/* A broker of fleet "blue": a policy naming no fleet, or another, is
	 * refused; its own is taken. */
	{
		static const char *const pols[3] = {
			"{\"revision\": 1, \"version\": 1, \"rules\": []}",
			"{\"revision\": 1, \"version\": 1, \"fleet\": \"green\", \"rules\": []}",
			"{\"revision\": 1, \"version\": 1, \"fleet\": \"blue\", \"rules\": []}",
		};
		static const char *const said[3] = { "names no \"fleet\"", "fleet \"green\"", "" };
		char c2[2300], path[160], sigpath[200], hex[129];
		unsigned char sg[64];

		snprintf(path, sizeof(path), "%s/blue.json", F.dir);
		snprintf(sigpath, sizeof(sigpath), "%s.sig", path);
		for (int fleet = 1; fleet >= 0; fleet--) {
			snprintf(c2, sizeof(c2),
				 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
				 " \"policy_public_key\": \"%s\", \"state_dir\": \"%s/state-check\","
				 " %s"
				 " \"storage\": {\"backend\": \"etcd\", \"endpoints\": [\"%s\"],"
				 "               \"prefix\": \"fleet-blue\", \"timeout_ms\": 2000},"
				 " \"endpoints\": [\"ipc://%s/check.sock\"],"
				 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:app\"}]}",
				 TSEC_BUILD_DIR, path, pkhex, F.dir,
				 fleet ? "\"fleet_id\": \"blue\"," : "", F.etcd.endpoints, F.dir,
				 (int)getuid());
			for (int i = 0; fleet && i < 3; i++) {
				write_file(path, pols[i]);
				crypto_sign_detached(sg, NULL, (const unsigned char *)pols[i],
						     strlen(pols[i]), F.sk);
				sodium_bin2hex(hex, sizeof(hex), sg, sizeof(sg));
				write_file(sigpath, hex);
				rc = check_with(c2, NULL, out, sizeof(out));
				if (rc != (i == 2 ? 0 : 2) || !strstr(out, said[i]))
					fail_msg("policy %d: --check exit %d said: %s", i, rc, out);
			}
			if (fleet)
				continue;
			/* No fleet_id; a damaged revision file refuses, whatever
			 * the policy (it took any revision before). */
			assert_int_equal(check_with(c2, NULL, out, sizeof(out)), 0);
			assert_int_equal(check_with(c2, "garbage\n", out, sizeof(out)), 2);
			if (!strstr(out, "damaged"))
				fail_msg("--check said: %s", out);
			assert_int_equal(check_with(c2, "", out, sizeof(out)), 2);
			assert_non_null(strstr(out, "damaged"));
		}
	}
}

/* ---- a broker dies in the middle of a run ---- */

struct run {
	atomic_int done, unanswered, wrong, unknown;
};

static void *caller(void *arg)
{
	struct run *r = arg;
	struct tsec_client *c = client_of(-1, 20000);
	struct tsec_error err;
	char params[128], *res;
	static atomic_int ids;
	int me = atomic_fetch_add(&ids, 1);

	for (int i = 0; i < 60; i++) {
		/* A put, then a get.  A put the dying broker took and did not
		 * answer is reported as such, never sent again. */
		snprintf(params, sizeof(params), "{\"key\": \"run/c%d\", \"value\": \"v%d\"}", me, i);
		switch (tsec_client_call(c, "store.put", params, NULL, &err)) {
		case 0:
			break;
		case TSEC_EUNKNOWN:
			atomic_fetch_add(&r->unknown, 1);
			continue;
		default:
			atomic_fetch_add(&r->unanswered, 1);
			continue;
		}
		snprintf(params, sizeof(params), "{\"key\": \"run/c%d\"}", me);
		res = NULL;
		if (tsec_client_call(c, "store.get", params, &res, &err)) {
			atomic_fetch_add(&r->unanswered, 1);
			continue;
		}
		{
			char want[32];
			snprintf(want, sizeof(want), "\"v%d\"", i);
			if (!strstr(res, want))
				atomic_fetch_add(&r->wrong, 1);
		}
		free(res);
		atomic_fetch_add(&r->done, 1);
	}
	tsec_client_close(&c);
	return NULL;
}

static void test_failover_when_a_broker_dies(void **state)
{
	struct run r = { 0 };
	pthread_t th[4];

	(void)state;
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, caller, &r);
	TU_WAIT(atomic_load(&r.done) >= 40);
	stop_broker(0, SIGKILL);         /* mid-run, no goodbye */
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&r.unanswered), 0);
	assert_int_equal(atomic_load(&r.wrong), 0);
	/* At most the one put per caller that was in flight at the kill. */
	assert_true(atomic_load(&r.unknown) <= 4);
	assert_int_equal(atomic_load(&r.done) + atomic_load(&r.unknown), 4 * 60);
}

static long calls_of(int which, const char *method)
{
	int rc;
	json_t *st = call(which, "stats", NULL, &rc);
	long n;

	assert_int_equal(rc, 0);
	n = (long)json_integer_value(json_object_get(json_object_get(st, "by_method"), method));
	json_decref(st);
	return n;
}

/*
 * A paused broker that took a lock.acquire: the client does not send it
 * to the other broker (that would leave two leases, one an orphan), it
 * says the outcome is unknown; a get still fails over (issue 17,
 * defect 9).
 */
static void test_paused_broker_no_resend(void **state)
{
	struct tsec_client *c = client_of(-1, 4000);
	struct tsec_error err;
	long before = calls_of(1, "lock.acquire");
	char *res = NULL;
	int rc;

	(void)state;
	/* Connected to broker 0 (the first endpoint), then it pauses. */
	assert_int_equal(tsec_client_call(c, "store.put",
					  "{\"key\": \"run/paused\", \"value\": \"v\"}",
					  NULL, &err), 0);
	kill(F.pid[0], SIGSTOP);
	rc = tsec_client_call(c, "lock.acquire", "{\"name\": \"paused\", \"ttl_ms\": 1000}",
			      NULL, &err);
	assert_int_equal(rc, TSEC_EUNKNOWN);
	assert_non_null(strstr(err.msg, "may or may not"));
	assert_int_equal(calls_of(1, "lock.acquire"), before);
	rc = tsec_client_call(c, "store.get", "{\"key\": \"run/paused\"}", &res, &err);
	kill(F.pid[0], SIGCONT);
	if (rc)
		fail_msg("get with broker 0 paused: %s", err.msg);
	free(res);
	tsec_client_close(&c);
}

/* A broker that stops leaves the locks it handed out to their leases:
 * the other broker keeps renewing them. */
static void test_sigterm_leaves_locks(void **state)
{
	json_t *lk, *r;
	char *p;
	int rc;

	(void)state;
	/* Restarted while its own file is at revision 1: it starts on the
	 * revision 3 it accepted and kept (test_fleet_binding_and_freshness). */
	start_broker(0);
	assert_int_equal(revision_at(0), 3);
	lk = call(0, "lock.acquire", "{\"name\": \"kept\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, 0);
	assert_true(asprintf(&p, "{\"name\": \"kept\", \"token\": \"%s\", \"ttl_ms\": 60000}",
			     json_string_value(json_object_get(lk, "token"))) > 0);
	stop_broker(0, SIGTERM);
	r = call(1, "lock.renew", p, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	r = call(1, "lock.release", p, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	free(p);
	json_decref(lk);
}

/* Puts the signed bundle of revision rev as the fleet's record, as
 * whoever can write etcd may (a replay of an older signed revision). */
static void plant_revision(int rev)
{
	struct tsec_store_opts o = { .backend = "etcd", .endpoints = F.etcd.endpoints,
				     .prefix = "fleet" };
	struct tsec_error err;
	struct tu_store t;
	char sig[129], *bundle = bundle_of(signed_policy(rev, sig), sig);

	tu_store_open_with(&t, &o);
	assert_int_equal(tsec__store_record_put(t.store, "policy", bundle, strlen(bundle), &err), 0);
	tu_store_close(&t);
	free(bundle);
}

static void publish(int which, int rev)
{
	char sig[129], *params = bundle_of(signed_policy(rev, sig), sig);
	json_t *r;
	int rc;

	r = call(which, "policy.publish", params, &rc);
	if (rc)
		fail_msg("publish of revision %d through broker %d: %d", rev, which, rc);
	json_decref(r);
	free(params);
}

static bool degraded_at(int which)
{
	char st[32];

	return !strcmp(status_at(which, st, sizeof(st)), "degraded");
}

/*
 * A replayed or frozen fleet policy is seen (issue 34, item 7).  Each
 * broker keeps the newest signed bundle it runs as a record of its own in
 * the fleet, so a broker that never saw a revision learns it from the
 * others: a new broker started while etcd holds a replayed older bundle
 * starts on the newest (it started on the replay and said "ok"), and a
 * broker paused while a revision was published and frozen (put back at
 * once) takes it when it resumes (it stayed on the old one, "ok").  Both
 * say degraded while the fleet's bundle is older than what they run.
 */
static void test_fleet_replay_and_freeze(void **state)
{
	char cfg[2048], mk[200];

	(void)state;
	start_broker(0);                 /* test_sigterm_leaves_locks stopped it */
	publish(0, 4);
	TU_WAIT(revision_at(1) == 4);
	assert_int_equal(revision_at(1), 4);
	/* The record rolled back to revision 3: both refuse it and say so. */
	plant_revision(3);
	TU_WAIT(degraded_at(0) && degraded_at(1));
	assert_true(degraded_at(0) && degraded_at(1));
	assert_int_equal(revision_at(0), 4);
	assert_int_equal(revision_at(1), 4);
	/* A new broker, nothing in its state_dir, its file at revision 1. */
	snprintf(F.ipc[2], sizeof(F.ipc[2]), "ipc://%s/b2.sock", F.dir);
	snprintf(F.cfg[2], sizeof(F.cfg[2]), "%s/broker2.json", F.dir);
	snprintf(F.err[2], sizeof(F.err[2]), "%s/broker2.err", F.dir);
	snprintf(mk, sizeof(mk), "mkdir -p %s/state2", F.dir);
	assert_int_equal(system(mk), 0);
	broker_cfg(2, F.etcd.endpoints, cfg, sizeof(cfg));
	write_file(F.cfg[2], cfg);
	start_broker(2);
	assert_int_equal(revision_at(2), 4);
	TU_WAIT(degraded_at(2));
	assert_true(degraded_at(2));
	/* A freeze: broker 1 paused while revision 5 is published and at
	 * once replaced by revision 4 again. */
	TU_WAIT(degraded_at(0));
	kill(F.pid[1], SIGSTOP);
	publish(0, 5);
	plant_revision(4);
	kill(F.pid[1], SIGCONT);
	TU_WAIT(revision_at(1) == 5 && revision_at(2) == 5);
	assert_int_equal(revision_at(1), 5);
	assert_int_equal(revision_at(2), 5);
	TU_WAIT(degraded_at(1) && degraded_at(2));
	assert_true(degraded_at(0) && degraded_at(1) && degraded_at(2));
	/* The fleet's record brought up to date: everyone ok again. */
	plant_revision(5);
	TU_WAIT(!degraded_at(0) && !degraded_at(1) && !degraded_at(2));
	assert_false(degraded_at(0) || degraded_at(1) || degraded_at(2));
}

/*
 * Brokers 2 and 3 over one storage (its JSON), each with a state_dir of
 * its own, the second's wall clock alone an hour ahead (libfaketime).
 */
static void start_clock_pair(const char *storage)
{
	if (access(FAKETIME_LIB, R_OK))
		fail_msg("%s is missing: sh scripts/deps.sh servers installs libfaketime",
			 FAKETIME_LIB);
	for (int i = 2; i < 4; i++) {
		char cfg[2048], mk[200];

		snprintf(F.ipc[i], sizeof(F.ipc[i]), "ipc://%s/b%d.sock", F.dir, i);
		snprintf(F.cfg[i], sizeof(F.cfg[i]), "%s/broker%d.json", F.dir, i);
		snprintf(F.err[i], sizeof(F.err[i]), "%s/broker%d.err", F.dir, i);
		snprintf(mk, sizeof(mk), "mkdir -p %s/clock-state%d", F.dir, i);
		assert_int_equal(system(mk), 0);
		snprintf(cfg, sizeof(cfg),
			 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
			 " \"policy_public_key\": \"%s\", \"state_dir\": \"%s/clock-state%d\","
			 " \"storage\": %s, \"endpoints\": [\"%s\"],"
			 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:app\"}]}",
			 TSEC_BUILD_DIR, F.policy, pkhex, F.dir, i, storage, F.ipc[i], (int)getuid());
		write_file(F.cfg[i], cfg);
		F.fast[i] = i == 3;
		start_broker(i);
	}
}

/*
 * Two brokers on one machine over one file store, the second's wall clock
 * an hour ahead (issue 34, item 3).  Before, the second took over the
 * first's live lock at once (two holders), and told its holder a lease
 * end on its own wrong clock.  Now leases are judged by the boot clock
 * every process shares, and each answer also says what is left of the
 * lease (expires_in_ms), true on any holder's clock.
 */
static void test_wall_clock_an_hour_fast(void **state)
{
	json_t *lk, *r;
	int64_t left, ahead;
	char *p, storage[512];
	int rc;

	(void)state;
	snprintf(storage, sizeof(storage), "\"%s/files\"", F.dir);
	start_clock_pair(storage);
	lk = call(2, "lock.acquire", "{\"name\": \"clk\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, 0);
	left = json_integer_value(json_object_get(lk, "expires_in_ms"));
	assert_true(left > 0 && left <= 60000);
	/* The fast broker sees a live lock. */
	r = call(3, "lock.acquire", "{\"name\": \"clk\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, TSEC_EBUSY);
	json_decref(r);
	/* Its holder is told the truth, whatever the broker's clock says. */
	assert_true(asprintf(&p, "{\"name\": \"clk\", \"token\": \"%s\", \"ttl_ms\": 60000}",
			     json_string_value(json_object_get(lk, "token"))) > 0);
	r = call(3, "lock.renew", p, &rc);
	assert_int_equal(rc, 0);
	left = json_integer_value(json_object_get(r, "expires_in_ms"));
	assert_true(left > 0 && left <= 60000);
	ahead = json_integer_value(json_object_get(r, "expires_ms")) - tsec__wall_ms();
	assert_true(ahead > 3600 * 1000);    /* the broker's clock is an hour fast */
	json_decref(r);
	r = call(3, "lock.release", p, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	free(p);
	json_decref(lk);
	stop_broker(2, SIGTERM);
	stop_broker(3, SIGTERM);
}

/*
 * Two brokers over etcd with default settings, the second's wall clock
 * alone an hour ahead (issue 48, item 5): a lock taken through the first
 * is renewed, written under (fenced) and released through the second,
 * and the second sees it held.  Before, the guards compared the deadline
 * the first broker wrote (its wall clock) with the second's wall clock:
 * renew and fenced put were refused "your lease has ended" with a minute
 * left.  No broker's clock decides anything about a lock on etcd now;
 * etcd's lease of the lock does.
 */
static void test_etcd_wall_clock_an_hour_fast(void **state)
{
	json_t *lk, *r;
	char *p, *w, storage[512];
	int rc;

	(void)state;
	snprintf(storage, sizeof(storage), "{\"backend\": \"etcd\", \"endpoints\": [\"%s\"], "
		 "\"prefix\": \"clocks\"}", F.etcd.endpoints);
	start_clock_pair(storage);
	lk = call(2, "lock.acquire", "{\"name\": \"clk\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, 0);
	/* The fast broker sees a live lock. */
	r = call(3, "lock.acquire", "{\"name\": \"clk\", \"ttl_ms\": 60000}", &rc);
	assert_int_equal(rc, TSEC_EBUSY);
	json_decref(r);
	assert_true(asprintf(&p, "{\"name\": \"clk\", \"token\": \"%s\", \"ttl_ms\": 60000}",
			     json_string_value(json_object_get(lk, "token"))) > 0);
	assert_true(asprintf(&w, "{\"key\": \"clocks/v\", \"value\": \"x\", \"lock\": "
			     "{\"name\": \"clk\", \"token\": \"%s\", \"fence\": %lld}}",
			     json_string_value(json_object_get(lk, "token")),
			     (long long)json_integer_value(json_object_get(lk, "fence"))) > 0);
	/* Its holder renews and writes through the fast broker. */
	r = call(3, "store.put", w, &rc);
	if (rc)
		fail_msg("a fenced put through a broker an hour fast: %d", rc);
	json_decref(r);
	r = call(3, "lock.renew", p, &rc);
	if (rc)
		fail_msg("a renew through a broker an hour fast: %d", rc);
	json_decref(r);
	/* And through the first again, the fast broker having renewed. */
	r = call(2, "store.put", w, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	r = call(3, "lock.release", p, &rc);
	assert_int_equal(rc, 0);
	json_decref(r);
	free(p);
	free(w);
	json_decref(lk);
	stop_broker(2, SIGTERM);
	stop_broker(3, SIGTERM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_reaches_the_backend),
		cmocka_unit_test(test_lock_through_either_broker),
		cmocka_unit_test(test_fleet_policy),
		cmocka_unit_test(test_fleet_binding_and_freshness),
		cmocka_unit_test(test_paused_broker_no_resend),
		cmocka_unit_test(test_failover_when_a_broker_dies),
		cmocka_unit_test(test_sigterm_leaves_locks),
		cmocka_unit_test_teardown(test_fleet_replay_and_freeze, stop_extra),
		cmocka_unit_test_teardown(test_wall_clock_an_hour_fast, stop_extra),
		cmocka_unit_test_teardown(test_etcd_wall_clock_an_hour_fast, stop_extra),
	};

	return cmocka_run_group_tests_name("brokers: two on one etcd", tests, setup, teardown);
}
