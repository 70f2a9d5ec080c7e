/*
 * tsec-broker end to end: starts the real daemon in a temporary folder on
 * ipc and tcp and drives it through the client library.  Callers allowed
 * and denied, an unknown key refused at the handshake, a payload claiming
 * another principal, malformed and oversized messages followed by a call
 * that still works, reloads of good, bad, unsigned and tampered policies,
 * the decision log, and SIGTERM during a burst with every call answered.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/client.h"

static const char *policy_v1 =
	"{\"version\": 1,\n"
	" \"floor\": [{\"id\": \"f-keys\", \"action\": [\"storage.list\"], \"resource\": [\"certificates/**/*.key\"]}],\n"
	" \"rules\": [\n"
	"  {\"id\": \"good-all\", \"effect\": \"allow\", \"principal\": [\"svc:good\"], \"action\": [\"*\"], \"resource\": [\"**\"]},\n"
	"  {\"id\": \"ipc-reads\", \"effect\": \"allow\", \"principal\": [\"role:local\"],\n"
	"   \"action\": [\"storage.load\", \"storage.exists\"], \"resource\": [\"**\"]},\n"
	"  {\"id\": \"bad-own-locks\", \"effect\": \"allow\", \"principal\": [\"svc:bad\"],\n"
	"   \"action\": [\"lock.*\"], \"resource\": [\"locks/other-*\"]}\n"
	" ]}\n";

static const char *policy_v2 =
	"{\"version\": 1,\n"
	" \"rules\": [\n"
	"  {\"id\": \"good-all\", \"effect\": \"allow\", \"principal\": [\"svc:good\"], \"action\": [\"*\"], \"resource\": [\"**\"]},\n"
	"  {\"id\": \"bad-may-load\", \"effect\": \"allow\", \"principal\": [\"svc:bad\"], \"action\": [\"storage.load\"], \"resource\": [\"**\"]}\n"
	" ]}\n";

static struct {
	char dir[64];
	char policy[128], config[128], log[128], err[128];
	char ipc[160], tcp[64], metrics[64];
	char srv_pub[41], srv_sec[41];
	char good_pub[41], good_sec[41], bad_pub[41], bad_sec[41], unk_pub[41], unk_sec[41];
	unsigned char sign_pk[32], sign_sk[64];
	pid_t pid;
} D;

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Writes a policy text with a "revision" (signed policies need one and
 * never go back). */
static void write_policy(const char *text, int revision)
{
	char buf[8192];

	assert_true(text[0] == '{');
	snprintf(buf, sizeof(buf), "{\"revision\": %d, %s", revision, text + 1);
	write_file(D.policy, buf);
}

static void sign_policy(void)
{
	unsigned char sig[64];
	char hex[129], path[160];
	char *text;
	size_t len;
	struct tsec_error err;

	assert_int_equal(tsec_read_file(D.policy, 1 << 20, &text, &len, &err), 0);
	crypto_sign_detached(sig, NULL, (unsigned char *)text, len, D.sign_sk);
	free(text);
	sodium_bin2hex(hex, sizeof(hex), sig, sizeof(sig));
	snprintf(path, sizeof(path), "%s.sig", D.policy);
	write_file(path, hex);
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static struct tsec_client *client(const char *who, int timeout_ms)
{
	struct tsec_client_opts o = { .endpoint = D.tcp, .server_public_key = D.srv_pub,
				      .timeout_ms = timeout_ms };
	struct tsec_client *c;
	struct tsec_error err;

	if (!strcmp(who, "ipc")) {
		o.endpoint = D.ipc;
		o.server_public_key = NULL;
	} else if (!strcmp(who, "good")) {
		o.public_key = D.good_pub;
		o.secret_key = D.good_sec;
	} else if (!strcmp(who, "bad")) {
		o.public_key = D.bad_pub;
		o.secret_key = D.bad_sec;
	} else {
		o.public_key = D.unk_pub;
		o.secret_key = D.unk_sec;
	}
	if (tsec_client_open(&c, &o, &err))
		fail_msg("client: %s", err.msg);
	return c;
}

static json_t *stats(void)
{
	struct tsec_client *c = client("good", 3000);
	struct tsec_error err;
	char *res;
	json_t *j;

	assert_int_equal(tsec_client_call(c, "stats", NULL, &res, &err), 0);
	tsec_client_close(&c);
	j = json_loads(res, 0, NULL);
	free(res);
	return j;
}

static long stat_of(const char *name)
{
	json_t *j = stats();
	long v = (long)json_integer_value(json_object_get(j, name));
	json_decref(j);
	return v;
}

static void start_broker(void)
{
	D.pid = fork();
	assert_true(D.pid >= 0);
	if (D.pid == 0) {
		FILE *e = freopen(D.err, "w", stderr);
		(void)e;
		execl(TSEC_BUILD_DIR "/tsec-broker", "tsec-broker", "--config", D.config, (char *)NULL);
		_exit(127);
	}
	/* Ready when health answers (bounded wait: about 60 s; each try waits
	 * longer, for slow builds such as ThreadSanitizer's). */
	for (int i = 0; i < 200; i++) {
		struct tsec_client *c = client("good", i < 50 ? 50 : 500);
		struct tsec_error err;
		int rc = tsec_client_call(c, "health", NULL, NULL, &err);
		tsec_client_close(&c);
		if (rc == 0)
			return;
	}
	fail_msg("tsec-broker did not come up; see %s", D.err);
}

static int setup(void **state)
{
	char cfg[4096], srvdir[128];
	(void)state;

	snprintf(D.dir, sizeof(D.dir), "/tmp/tsec-daemon-XXXXXX");
	if (!mkdtemp(D.dir) || sodium_init() < 0)
		return -1;
	snprintf(D.policy, sizeof(D.policy), "%s/policy.json", D.dir);
	snprintf(D.config, sizeof(D.config), "%s/broker.json", D.dir);
	snprintf(D.log, sizeof(D.log), "%s/decisions.log", D.dir);
	snprintf(D.err, sizeof(D.err), "%s/broker.err", D.dir);
	snprintf(srvdir, sizeof(srvdir), "%s/run", D.dir);
	snprintf(D.ipc, sizeof(D.ipc), "ipc://%s/tsec.sock", srvdir);
	snprintf(D.tcp, sizeof(D.tcp), "tcp://127.0.0.1:%d", free_port());
	snprintf(D.metrics, sizeof(D.metrics), "127.0.0.1:%d", free_port());
	zmq_curve_keypair(D.srv_pub, D.srv_sec);
	zmq_curve_keypair(D.good_pub, D.good_sec);
	zmq_curve_keypair(D.bad_pub, D.bad_sec);
	zmq_curve_keypair(D.unk_pub, D.unk_sec);
	crypto_sign_keypair(D.sign_pk, D.sign_sk);
	write_policy(policy_v1, 1);
	sign_policy();
	{
		char pkhex[65];
		sodium_bin2hex(pkhex, sizeof(pkhex), D.sign_pk, 32);
		snprintf(cfg, sizeof(cfg),
			 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
			 " \"policy_public_key\": \"%s\", \"storage\": \"%s/store\","
			 " \"decision_log\": \"%s\", \"metrics_listen\": \"%s\","
			 " \"endpoints\": [\"%s\", \"%s\"],"
			 " \"server_secret_key\": \"%s\", \"max_message\": 4096, \"workers\": 3,"
			 " \"clients\": [{\"public_key\": \"%s\", \"principal\": \"svc:good\", \"admin\": true},"
			 "               {\"public_key\": \"%s\", \"principal\": \"svc:bad\"}],"
			 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:local\", \"roles\": [\"local\"]}]}",
			 TSEC_BUILD_DIR, D.policy, pkhex, D.dir, D.log, D.metrics, D.ipc, D.tcp, D.srv_sec,
			 D.good_pub, D.bad_pub, (int)getuid());
	}
	write_file(D.config, cfg);
	start_broker();
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	if (D.pid > 0) {
		kill(D.pid, SIGKILL);
		waitpid(D.pid, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", D.dir);
	return system(cmd) == 0 ? 0 : -1;
}

#define S(lit) { lit, sizeof(lit) - 1 }

static const struct tsec_request load_req = {
	.action = S("storage.load"),
	.resource = S("certificates/acme/example.com/example.com.crt"),
};

static void test_daemon_callers(void **state)
{
	struct tsec_client *good = client("good", 3000), *bad = client("bad", 3000);
	struct tsec_client *ipc = client("ipc", 3000);
	struct tsec_request list_key = {
		.action = S("storage.list"),
		.resource = S("certificates/a/b/b.key"),
	};
	struct tsec_decision d;
	struct tsec_error err;
	(void)state;

	assert_int_equal(tsec_client_check(good, &load_req, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	assert_string_equal(d.rules[0], "good-all");
	assert_int_equal(tsec_client_check(good, &list_key, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_FLOOR);
	assert_int_equal(tsec_client_check(bad, &load_req, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_DEFAULT);
	assert_int_equal(d.allow, 0);
	/* Over ipc the caller is its uid's principal, with its role. */
	assert_int_equal(tsec_client_check(ipc, &load_req, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	assert_string_equal(d.rules[0], "ipc-reads");
	/* Storage through the broker, gated by the caller's principal. */
	assert_int_equal(tsec_client_call(good, "store.put",
		"{\"key\": \"certificates/acme/x/x.json\", \"value\": \"{}\"}", NULL, &err), 0);
	assert_int_equal(tsec_client_call(bad, "store.put",
		"{\"key\": \"certificates/acme/x/x.json\", \"value\": \"{}\"}", NULL, &err), TSEC_EDENIED);
	char *res;
	assert_int_equal(tsec_client_call(ipc, "store.get",
		"{\"key\": \"certificates/acme/x/x.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"value\":\"{}\"}");
	free(res);
	/* Reload is for admin callers only. */
	assert_int_equal(tsec_client_call(bad, "reload", NULL, NULL, &err), TSEC_EDENIED);
	tsec_client_close(&good);
	tsec_client_close(&bad);
	tsec_client_close(&ipc);
}

/* Prometheus: the listener, and tsec stats --prometheus, say the same. */
static void test_daemon_metrics(void **state)
{
	static char body[65536], cli[65536];
	char url[128];
	struct tsec_client *c = client("good", 2000);
	struct tsec_error err;

	(void)state;
	assert_int_equal(tsec_client_call(c, "health", NULL, NULL, &err), 0);
	tsec_client_close(&c);
	snprintf(url, sizeof(url), "http://%s/metrics", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 5000), 200);
	assert_non_null(strstr(body, "# TYPE tsec_calls_total counter\ntsec_calls_total "));
	assert_non_null(strstr(body, "tsec_method_calls_total{method=\"health\"} "));
	assert_non_null(strstr(body, "# TYPE tsec_call_duration_seconds histogram"));
	assert_non_null(strstr(body, "tsec_call_duration_seconds_bucket{method=\"health\",le=\"+Inf\"} "));
	assert_non_null(strstr(body, "tsec_call_duration_seconds_count{method=\"health\"} "));
	assert_null(strstr(body, "tsec_call_duration_seconds_count{method=\"health\"} 0\n"));
	/* Nothing else is served, and nothing is taken. */
	snprintf(url, sizeof(url), "http://%s/", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 5000), 404);
	snprintf(url, sizeof(url), "http://%s/metrics", D.metrics);
	assert_int_not_equal(tu_http(url, "x=1", body, sizeof(body), 5000), 200);
	/* The CLI renders the same families. */
	{
		char cmd[512], path[160];
		FILE *p;
		size_t n;

		snprintf(path, sizeof(path), "%s/good.pub", D.dir);
		write_file(path, D.good_pub);
		snprintf(path, sizeof(path), "%s/good.key", D.dir);
		write_file(path, D.good_sec);
		chmod(path, 0600);
		snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/tsec stats --prometheus --endpoint %s "
			 "--server-key '%s' --key %s/good 2>&1", D.tcp, D.srv_pub, D.dir);
		assert_non_null(p = popen(cmd, "r"));
		n = fread(cli, 1, sizeof(cli) - 1, p);
		cli[n] = '\0';
		pclose(p);
		if (!strstr(cli, "# TYPE tsec_call_duration_seconds histogram"))
			fail_msg("tsec stats --prometheus said: %.300s", cli);
	}
}

/*
 * One caller cannot fill the broker's table of held locks (issue 17,
 * defect 14): past its quota (max_locks_per_caller, 256 by default) its
 * acquires are refused, with no lock taken, while another caller still
 * gets its lock; a release makes room again.
 */
#define TSEC_D_QUOTA 256 /* max_locks_per_caller's default */

static void test_daemon_lock_quota(void **state)
{
	struct tsec_client *good = client("good", 5000), *bad = client("bad", 5000);
	static char tokens[TSEC_D_QUOTA][33];
	struct tsec_error err;
	char params[160], *res;
	json_t *j;
	(void)state;

	for (int i = 0; i < TSEC_D_QUOTA; i++) {
		snprintf(params, sizeof(params), "{\"name\": \"quota-%d\", \"ttl_ms\": 600000}", i);
		if (tsec_client_call(good, "lock.acquire", params, &res, &err))
			fail_msg("acquire %d: %s", i, err.msg);
		assert_non_null(j = json_loads(res, 0, NULL));
		snprintf(tokens[i], sizeof(tokens[i]), "%s",
			 json_string_value(json_object_get(j, "token")));
		json_decref(j);
		free(res);
	}
	assert_int_equal(tsec_client_call(good, "lock.acquire",
		"{\"name\": \"quota-over\", \"ttl_ms\": 600000}", NULL, &err), TSEC_EBUSY);
	assert_non_null(strstr(err.msg, "max_locks_per_caller"));
	/* Nothing was taken for the refused call: another caller could. */
	assert_int_equal(tsec_client_call(bad, "lock.acquire",
		"{\"name\": \"other-1\", \"ttl_ms\": 600000}", &res, &err), 0);
	assert_non_null(j = json_loads(res, 0, NULL));
	snprintf(params, sizeof(params), "{\"name\": \"other-1\", \"token\": \"%s\"}",
		 json_string_value(json_object_get(j, "token")));
	json_decref(j);
	free(res);
	assert_int_equal(tsec_client_call(bad, "lock.release", params, NULL, &err), 0);
	/* A release makes room for one more. */
	snprintf(params, sizeof(params), "{\"name\": \"quota-0\", \"token\": \"%s\"}", tokens[0]);
	assert_int_equal(tsec_client_call(good, "lock.release", params, NULL, &err), 0);
	assert_int_equal(tsec_client_call(good, "lock.acquire",
		"{\"name\": \"quota-over\", \"ttl_ms\": 600000}", &res, &err), 0);
	assert_non_null(j = json_loads(res, 0, NULL));
	snprintf(tokens[0], sizeof(tokens[0]), "%s", json_string_value(json_object_get(j, "token")));
	json_decref(j);
	free(res);
	/* tokens[0] is quota-over's now. */
	for (int i = 0; i < TSEC_D_QUOTA; i++) {
		char name[16];
		if (i)
			snprintf(name, sizeof(name), "quota-%d", i);
		else
			snprintf(name, sizeof(name), "quota-over");
		int n = snprintf(params, sizeof(params), "{\"name\": \"%s\", \"token\": \"%s\"}",
				 name, tokens[i]);
		assert_true(n > 0 && (size_t)n < sizeof(params));
		assert_int_equal(tsec_client_call(good, "lock.release", params, NULL, &err), 0);
	}
	tsec_client_close(&good);
	tsec_client_close(&bad);
}

static void test_daemon_unknown_key(void **state)
{
	long before = stat_of("zap_refused");
	struct tsec_client *unk = client("unknown", 400);
	struct tsec_error err;
	(void)state;

	/* Told apart from a timeout: the broker refused the key. */
	assert_int_equal(tsec_client_call(unk, "health", NULL, NULL, &err), TSEC_EDENIED);
	assert_non_null(strstr(err.msg, "authentication refused"));
	tsec_client_close(&unk);
	assert_true(stat_of("zap_refused") > before);
}

static void test_daemon_principal_claim(void **state)
{
	struct tsec_client *bad = client("bad", 3000);
	struct tsec_error err;
	char *reply;
	const char *claim =
		"{\"id\": 7, \"method\": \"check\", \"principal\": \"svc:good\", \"params\": {\"requests\":"
		" [{\"action\": \"storage.load\", \"resource\": \"x\"}]}}";
	const char *inner =
		"{\"id\": 8, \"method\": \"check\", \"params\": {\"requests\":"
		" [{\"action\": \"storage.load\", \"resource\": \"x\", \"principal\": \"svc:good\"}]}}";
	(void)state;

	assert_int_equal(tsec_client_raw(bad, claim, strlen(claim), &reply, &err), 0);
	assert_non_null(strstr(reply, "\"code\":\"denied\""));
	assert_non_null(strstr(reply, "another principal"));
	free(reply);
	assert_int_equal(tsec_client_raw(bad, inner, strlen(inner), &reply, &err), 0);
	assert_non_null(strstr(reply, "\"error\""));
	assert_non_null(strstr(reply, "authentication"));
	free(reply);
	tsec_client_close(&bad);
	assert_true(stat_of("principal_mismatch") >= 1);
}

static void test_daemon_bad_input(void **state)
{
	static const char *bad[] = {
		"not json at all",
		"[1, 2, 3]",
		"{\"id\": 1, \"method\": \"check\", \"params\": {\"requests\": [{\"action\": \"storage.load\"",
		"{\"id\": 1, \"method\": \"no.such.method\"}",
		"{\"id\": 1}",
		"{\"id\": 1, \"method\": 42}",
		"{\"id\": 1, \"method\": \"check\", \"params\": []}",
		"{\"id\": 1, \"method\": \"check\", \"params\": {\"requests\": \"all\"}}",
		"{\"id\": 1, \"method\": \"check\", \"params\": {\"requests\": []}}",
		"{\"id\": 1, \"method\": \"check\", \"params\": {\"requests\": [{\"action\": 5, \"resource\": \"x\"}]}}",
		"{\"id\": 1, \"method\": \"check\", \"params\": {\"requests\": [{\"action\": \"a\", \"resource\": \"x\", \"context\": {\"ttl_ms\": -5}}]}}",
		"{\"id\": 1, \"method\": \"store.put\", \"params\": {\"key\": \"../../etc/passwd\", \"value\": \"x\"}}",
		"{\"id\": 1, \"method\": \"store.put\", \"params\": {\"key\": \"k\", \"value_b64\": \"!!!\"}}",
		"{\"id\": 1, \"method\": \"lock.renew\", \"params\": {\"name\": \"x\", \"token\": \"zz\", \"ttl_ms\": 5}}",
		"{\"id\": 1, \"method\": \"lock.acquire\", \"params\": {\"name\": \"x\"}}",
		"",
	};
	struct tsec_client *good = client("good", 3000);
	struct tsec_decision d;
	struct tsec_error err;
	char *reply, *big;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(tsec_client_raw(good, bad[i], strlen(bad[i]), &reply, &err), 0);
		if (!strstr(reply, "\"error\""))
			fail_msg("message %zu got no error: %s", i, reply);
		free(reply);
	}
	/* Oversized: between max_message and twice it, an error reply. */
	big = malloc(6000);
	memset(big, ' ', 6000);
	memcpy(big, "{\"id\": 1, \"method\": \"health\"", 28);
	big[5998] = '}';
	big[5999] = '\0';
	assert_int_equal(tsec_client_raw(good, big, 6000, &reply, &err), 0);
	assert_non_null(strstr(reply, "too_big"));
	free(reply);
	free(big);
	/* Three frames instead of a delimiter and one. */
	{
		void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
		int zero = 0, tmo = 3000;
		char buf[512];
		zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
		zmq_connect(s, D.ipc);
		zmq_send(s, "", 0, ZMQ_SNDMORE);
		zmq_send(s, "{}", 2, ZMQ_SNDMORE);
		zmq_send(s, "{}", 2, 0);
		int n;
		do {
			n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		} while (n == 0);
		assert_true(n > 0);
		buf[n < 511 ? n : 511] = '\0';
		assert_non_null(strstr(buf, "bad_request"));
		zmq_close(s);
		zmq_ctx_term(ctx);
	}
	/* And the broker still serves. */
	assert_int_equal(tsec_client_check(good, &load_req, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	tsec_client_close(&good);
	assert_true(stat_of("malformed") >= 5);
	assert_true(stat_of("oversized") >= 1);
}

static int bad_allowed(void)
{
	struct tsec_client *bad = client("bad", 3000);
	struct tsec_decision d;
	struct tsec_error err;
	assert_int_equal(tsec_client_check(bad, &load_req, 1, &d, &err), 0);
	tsec_client_close(&bad);
	return d.allow;
}

static void reload_rpc(int want)
{
	struct tsec_client *good = client("good", 5000);
	struct tsec_error err;
	int rc = tsec_client_call(good, "reload", NULL, NULL, &err);
	tsec_client_close(&good);
	if (rc != want)
		fail_msg("reload: %d (%s), want %d", rc, err.msg, want);
}

static void test_daemon_reload(void **state)
{
	char sig[160];
	(void)state;

	assert_false(bad_allowed());
	/* Good and signed: serves at once. */
	write_policy(policy_v2, 2);
	sign_policy();
	reload_rpc(0);
	assert_true(bad_allowed());
	/* Bad, though signed: refused, the old one serves. */
	write_policy("{\"version\": 1, \"rules\": [{\"id\": 1}]}", 10);
	sign_policy();
	reload_rpc(TSEC_EPOLICY);
	assert_true(bad_allowed());
	/* Unsigned: refused. */
	write_file(D.policy, policy_v1);
	snprintf(sig, sizeof(sig), "%s.sig", D.policy);
	unlink(sig);
	reload_rpc(TSEC_ESIGNATURE);
	assert_true(bad_allowed());
	/* Tampered after signing: refused. */
	sign_policy();
	write_file(D.policy, "{\"version\": 1, \"rules\": [{\"id\": \"all\", \"effect\": \"allow\","
		   " \"action\": [\"*\"], \"resource\": [\"**\"]}]}");
	reload_rpc(TSEC_ESIGNATURE);
	assert_true(bad_allowed());
	/* SIGHUP reloads too. */
	write_policy(policy_v1, 3);
	sign_policy();
	long reloads = stat_of("reloads");
	kill(D.pid, SIGHUP);
	TU_WAIT(stat_of("reloads") != reloads);
	assert_false(bad_allowed());
	assert_true(stat_of("reload_failures") >= 3);
	/* No rollback: an older, correctly signed policy is refused, and so
	 * is other content under the running revision; the same one is fine. */
	write_policy(policy_v2, 2);
	sign_policy();
	reload_rpc(TSEC_ESIGNATURE);
	assert_false(bad_allowed());
	write_policy(policy_v2, 3);
	sign_policy();
	reload_rpc(TSEC_ESIGNATURE);
	write_policy(policy_v1, 3);
	sign_policy();
	reload_rpc(0);
	/* The revision outlives the broker. */
	char state_file[256], *text;
	size_t len;
	struct tsec_error err;
	snprintf(state_file, sizeof(state_file), "%s/store/.tsec-policy-revision", D.dir);
	assert_int_equal(tsec_read_file(state_file, 4096, &text, &len, &err), 0);
	assert_int_equal(strncmp(text, "revision 3 sha256 ", 18), 0);
	free(text);
	/* health shows which policy serves. */
	struct tsec_client *c = client("good", 3000);
	char *res;
	assert_int_equal(tsec_client_call(c, "health", NULL, &res, &err), 0);
	assert_non_null(strstr(res, "\"policy_revision\":3"));
	assert_non_null(strstr(res, "\"policy_sha256\":\""));
	free(res);
	tsec_client_close(&c);
}

/* The decision log's lines about logged/marker-7f3a, each checked. */
static int marker_lines(void)
{
	int lines = 0;
	char line[4096], last_did[64] = "";
	FILE *f = fopen(D.log, "r");

	while (f && fgets(line, sizeof(line), f)) {
		json_t *j = json_loads(line, 0, NULL);
		if (!j)
			fail_msg("log line is not JSON: %s", line);
		if (!strcmp(json_string_value(json_object_get(j, "resource")), "logged/marker-7f3a")) {
			assert_string_equal(json_string_value(json_object_get(j, "principal")), "svc:good");
			assert_string_equal(json_string_value(json_object_get(j, "action")), "storage.exists");
			assert_string_equal(json_string_value(json_object_get(j, "decision")), "allow");
			assert_string_equal(json_string_value(json_array_get(json_object_get(j, "rules"), 0)),
					    "good-all");
			assert_true(json_is_false(json_object_get(j, "floor")));
			assert_true(json_integer_value(json_object_get(j, "latency_ns")) > 0);
			assert_non_null(json_object_get(j, "time_ms"));
			/* Each line its own decision id; the policy that decided. */
			const char *did = json_string_value(json_object_get(j, "decision_id"));
			assert_non_null(did);
			assert_string_not_equal(did, last_did);
			snprintf(last_did, sizeof(last_did), "%s", did);
			assert_int_equal(strlen(json_string_value(json_object_get(j, "policy_sha256"))), 64);
			assert_true(json_is_array(json_object_get(j, "roles")));
			lines++;
		}
		json_decref(j);
	}
	if (f)
		fclose(f);
	return lines;
}

/* Every Check answer is one line of the decision log. */
static void test_daemon_decision_log(void **state)
{
	struct tsec_client *good = client("good", 3000);
	struct tsec_request r = { .action = S("storage.exists"),
				  .resource = S("logged/marker-7f3a") };
	struct tsec_decision d[3];
	struct tsec_request batch[3] = { r, r, r };
	struct tsec_error err;
	int lines = 0;
	(void)state;

	assert_int_equal(tsec_client_check(good, batch, 3, d, &err), 0);
	/* A storage call's own check is logged too, with its rules. */
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"key\": \"logged/marker-7f3a\"}", NULL, &err), 0);
	tsec_client_close(&good);
	TU_WAIT((lines = marker_lines()) >= 4);
	assert_int_equal(lines, 4);
	assert_int_equal(stat_of("log_dropped"), 0);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The tsec CLI against the running broker: exit 0 allow, 1 deny, 2 error. */
static void test_daemon_cli(void **state)
{
	const char *tsec = TSEC_BUILD_DIR "/tsec";
	char out[4096], buf[8192];
	FILE *f;
	size_t n;
	(void)state;

	snprintf(out, sizeof(out), "%s/cli.out", D.dir);
	/* ipc: this uid is svc:local with role local. */
	assert_int_equal(sh("%s check --endpoint %s --action storage.load --resource a/b > %s",
			    tsec, D.ipc, out), 0);
	assert_int_equal(sh("%s check --endpoint %s --action storage.store --resource a/b --size 1 > %s",
			    tsec, D.ipc, out), 1);
	assert_int_equal(sh("%s check --endpoint %s --json --action storage.list"
			    " --resource certificates/a/b/b.key > %s", tsec, D.ipc, out), 1);
	f = fopen(out, "r");
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	assert_non_null(strstr(buf, "\"status\":\"floor\""));
	assert_int_equal(sh("%s eval --endpoint %s --action storage.load --resource"
			    " certificates/acme/example.com/example.com.crt > %s", tsec, D.ipc, out), 0);
	f = fopen(out, "r");
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	assert_non_null(strstr(buf, "domain"));
	assert_non_null(strstr(buf, "ipc-reads"));
	/* Missing flags and unknown commands are errors. */
	assert_int_equal(sh("%s check --endpoint %s > %s 2>&1", tsec, D.ipc, out), 2);
	assert_int_equal(sh("%s frobnicate > %s 2>&1", tsec, out), 2);
	assert_int_equal(sh("%s check --help > %s", tsec, out), 0);
	assert_int_equal(sh("%s health --endpoint %s > %s", tsec, D.ipc, out), 0);
	/* tcp with keys from files. */
	{
		char pre[128], path[160];
		snprintf(pre, sizeof(pre), "%s/goodkey", D.dir);
		snprintf(path, sizeof(path), "%s.pub", pre);
		write_file(path, D.good_pub);
		snprintf(path, sizeof(path), "%s.key", pre);
		write_file(path, D.good_sec);
		assert_int_equal(sh("%s store put --endpoint %s --server-key '%s' --key %s cli/x - < examples/policy.json > %s",
				    tsec, D.tcp, D.srv_pub, pre, out), 0);
		assert_int_equal(sh("%s lock acquire cli-lock --ttl-ms 5000 --endpoint %s --server-key '%s' --key %s > %s",
				    tsec, D.tcp, D.srv_pub, pre, out), 0);
		/* Renew and release with the token acquire printed (both once
		 * failed with "unexpected argument"); a lease left behind would
		 * end during a later test and move its count. */
		assert_int_equal(sh("T=$(sed -n 's/^token *\"\\(.*\\)\"$/\\1/p' %s) && [ -n \"$T\" ] && "
				    "%s lock renew cli-lock \"$T\" --ttl-ms 5000 --endpoint %s --server-key '%s' --key %s "
				    "> /dev/null && %s lock release cli-lock \"$T\" --endpoint %s --server-key '%s' "
				    "--key %s > /dev/null && ! %s lock release cli-lock \"$T\" --endpoint %s "
				    "--server-key '%s' --key %s 2> /dev/null",
				    out, tsec, D.tcp, D.srv_pub, pre, tsec, D.tcp, D.srv_pub, pre,
				    tsec, D.tcp, D.srv_pub, pre), 0);
	}
	/* lint: every error with its place, exit 2; a good policy exits 0. */
	snprintf(buf, sizeof(buf), "%s/lint.json", D.dir);
	write_file(buf, "{\"version\": 1, \"rules\": ["
		   "{\"id\": \"a\", \"effect\": \"allow\", \"action\": [\"storage.nope\"], \"resource\": [\"x\"]},"
		   "{\"id\": \"b\", \"effect\": \"allow\", \"action\": [\"*\"], \"resource\": [\"x\"]},"
		   "{\"id\": \"c\", \"effect\": \"maybe\", \"action\": [\"*\"], \"resource\": [\"x\"]}]}");
	assert_int_equal(sh("%s lint --module %s %s > %s", tsec, MODULE_PATH, buf, out), 2);
	{
		char got[4096];
		FILE *g = fopen(out, "r");
		size_t k = fread(got, 1, sizeof(got) - 1, g);
		got[k] = '\0';
		fclose(g);
		assert_non_null(strstr(got, "/rules/0/action/0"));
		assert_non_null(strstr(got, "/rules/2/effect"));
		assert_null(strstr(got, "/rules/1/"));
	}
	assert_int_equal(sh("%s lint --module %s examples/policy.json > %s", tsec, MODULE_PATH, out), 0);
	/* Usage errors exit 2 and name the bad value; --version everywhere. */
	assert_int_equal(sh("%s check --action storage.read --resource a/b 2> %s", tsec, out), 2);
	assert_int_equal(sh("grep -q \"did you mean 'storage.load'\" %s", out), 0);
	assert_int_equal(sh("%s check --action storage.store --resource a/b 2> /dev/null", tsec), 2);
	assert_int_equal(sh("%s check --action storage.load --resource a/b extra 2> /dev/null", tsec), 2);
	assert_int_equal(sh("%s check --timeout-ms -5 --action storage.load --resource a/b 2> /dev/null",
			    tsec), 2);
	assert_int_equal(sh("%s check --endpoint=%s --action=storage.load --resource=a/b > /dev/null",
			    tsec, D.ipc), 0);
	assert_int_equal(sh("%s --version | grep -q '^tsec '", tsec), 0);
	/* Raw bytes (a NUL, not UTF-8) go in and come out exactly. */
	snprintf(buf, sizeof(buf), "%s/raw.bin", D.dir);
	assert_int_equal(sh("printf 'a\\000b\\377c' > %s", buf), 0);
	assert_int_equal(sh("%s store put --endpoint %s raw/bytes %s > /dev/null", tsec, D.ipc, buf), 1);
	{
		/* The ipc caller may only load and check; write as svc:good over tcp. */
		char srvpub[256], keyp[256];
		snprintf(srvpub, sizeof(srvpub), "%s/srv.pub", D.dir);
		snprintf(keyp, sizeof(keyp), "%s/good", D.dir);
		write_file(srvpub, D.srv_pub);
		snprintf(buf, sizeof(buf), "%s/good.pub", D.dir);
		write_file(buf, D.good_pub);
		snprintf(buf, sizeof(buf), "%s/good.key", D.dir);
		write_file(buf, D.good_sec);
		snprintf(buf, sizeof(buf), "%s/raw.bin", D.dir);
		assert_int_equal(sh("%s store put --endpoint %s --server-key %s --key %s raw/bytes %s"
				    " > /dev/null", tsec, D.tcp, srvpub, keyp, buf), 0);
		assert_int_equal(sh("%s store get --endpoint %s --server-key %s --key %s raw/bytes"
				    " | cmp - %s", tsec, D.tcp, srvpub, keyp, buf), 0);
		/* tsec reload, as an admin. */
		assert_int_equal(sh("%s reload --endpoint %s --server-key %s --key %s > /dev/null",
				    tsec, D.tcp, srvpub, keyp), 0);
	}
	/* A missing broker is told apart from a timeout, at once. */
	assert_int_equal(sh("%s health --endpoint ipc://%s/nowhere.sock 2> %s", tsec, D.dir, out), 2);
	assert_int_equal(sh("grep -q 'no broker listening at ipc://%s/nowhere.sock' %s", D.dir, out), 0);
	assert_int_equal(sh("%s/tsec-broker --version | grep -q '^tsec-broker '", TSEC_BUILD_DIR), 0);
	assert_int_equal(sh("%s/verify_module --version | grep -q '^verify_module '", TSEC_BUILD_DIR), 0);
	/* keygen and sign make what the broker verifies. */
	assert_int_equal(sh("%s keygen --sign %s/signer > /dev/null && %s keygen --curve %s/c > /dev/null",
			    tsec, D.dir, tsec, D.dir), 0);
	snprintf(buf, sizeof(buf), "%s/c.key", D.dir);
	struct stat sb;
	assert_int_equal(stat(buf, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	/* keygen never overwrites a key; --force keeps the old one. */
	assert_int_equal(sh("%s keygen --sign %s/signer 2> /dev/null", tsec, D.dir), 2);
	assert_int_equal(sh("%s keygen --curve %s/c --force > /dev/null 2>&1", tsec, D.dir), 0);
	assert_int_equal(sh("ls %s/c.key.old-* > /dev/null", D.dir), 0);
	/* sign refuses a policy that does not compile, and writes no .sig. */
	snprintf(buf, sizeof(buf), "%s/broken.json", D.dir);
	write_file(buf, "{\"version\": 1, \"rules\": [{\"id\": \"x\"}]}");
	assert_int_equal(sh("%s sign --module %s --key %s/signer.sign.key %s 2> /dev/null", tsec,
			    MODULE_PATH, D.dir, buf), 2);
	assert_int_equal(sh("test -e %s.sig", buf), 1);
	snprintf(buf, sizeof(buf), "%s/signed.json", D.dir);
	write_file(buf, policy_v1);
	assert_int_equal(sh("%s sign --module %s --key %s/signer.sign.key %s > /dev/null", tsec,
			    MODULE_PATH, D.dir, buf), 0);
	{
		unsigned char pk[32], sig[64];
		char *text, *sigtext;
		size_t len, slen;
		struct tsec_error err;
		char path[8300];
		snprintf(path, sizeof(path), "%s/signer.sign.pub", D.dir);
		assert_int_equal(tsec_read_file(path, 4096, &text, &len, &err), 0);
		assert_int_equal(sodium_hex2bin(pk, 32, text, 64, NULL, NULL, NULL), 0);
		free(text);
		assert_int_equal(tsec_read_file(buf, 1 << 20, &text, &len, &err), 0);
		snprintf(path, sizeof(path), "%s.sig", buf);
		assert_int_equal(tsec_read_file(path, 4096, &sigtext, &slen, &err), 0);
		assert_int_equal(sodium_hex2bin(sig, 64, sigtext, 128, NULL, NULL, NULL), 0);
		assert_int_equal(crypto_sign_verify_detached(sig, (unsigned char *)text, len, pk), 0);
		free(text);
		free(sigtext);
	}
}

/* With ipc_curve, ipc callers are known by their CURVE key, not their uid. */
static void test_daemon_ipc_curve(void **state)
{
	char cfg[2048], path[160], ipc[200], err_path[160];
	struct tsec_client_opts o = { .server_public_key = D.srv_pub, .public_key = D.good_pub,
				      .secret_key = D.good_sec, .timeout_ms = 3000 };
	struct tsec_client *c = NULL;
	struct tsec_error err;
	pid_t pid;
	int rc = -1;
	(void)state;

	snprintf(ipc, sizeof(ipc), "ipc://%s/run2/tsec.sock", D.dir);
	snprintf(path, sizeof(path), "%s/broker2.json", D.dir);
	snprintf(err_path, sizeof(err_path), "%s/broker2.err", D.dir);
	snprintf(cfg, sizeof(cfg),
		 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"examples/policy.json\","
		 " \"storage\": \"%s/store2\", \"endpoints\": [\"%s\"], \"ipc_curve\": true,"
		 " \"allow_unsigned_policy\": true,"
		 " \"server_secret_key\": \"%s\","
		 " \"clients\": [{\"public_key\": \"%s\", \"principal\": \"svc:web-1\", \"roles\": [\"web\"]}],"
		 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:acme-issuer\"}]}",
		 TSEC_BUILD_DIR, D.dir, ipc, D.srv_sec, D.good_pub, (int)getuid());
	write_file(path, cfg);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *e = freopen(err_path, "w", stderr);
		(void)e;
		execl(TSEC_BUILD_DIR "/tsec-broker", "tsec-broker", "--config", path, (char *)NULL);
		_exit(127);
	}
	o.endpoint = ipc;
	for (int i = 0; i < 200 && rc != 0; i++) {
		o.timeout_ms = 50;
		assert_int_equal(tsec_client_open(&c, &o, &err), 0);
		rc = tsec_client_call(c, "health", NULL, NULL, &err);
		tsec_client_close(&c);
	}
	assert_int_equal(rc, 0);
	/* The key's principal decides, not the uid's. */
	o.timeout_ms = 3000;
	assert_int_equal(tsec_client_open(&c, &o, &err), 0);
	struct tsec_decision d;
	struct tsec_request store_req = load_req;
	store_req.action = (struct tsec_str)S("storage.store");
	store_req.ctx.has = TSEC_CTX_SIZE;
	store_req.ctx.size = 10;
	assert_int_equal(tsec_client_check(c, &load_req, 1, &d, &err), 0);
	assert_string_equal(d.rules[0], "web-reads-certs");
	/* svc:acme-issuer (this uid) could store; svc:web-1 (the key) cannot. */
	assert_int_equal(tsec_client_check(c, &store_req, 1, &d, &err), 0);
	tsec_client_close(&c);
	assert_int_equal(d.status, TSEC_STATUS_DEFAULT);
	/* Without a key, an ipc caller is not heard. */
	struct tsec_client_opts plain = { .endpoint = ipc, .timeout_ms = 300 };
	assert_int_equal(tsec_client_open(&c, &plain, &err), 0);
	assert_int_not_equal(tsec_client_call(c, "health", NULL, NULL, &err), 0);
	tsec_client_close(&c);
	kill(pid, SIGTERM);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

struct burst {
	atomic_int timeouts, answered, stopped;
};

static void *burst_main(void *arg)
{
	struct burst *b = arg;
	struct tsec_client *c = client("good", 5000);
	struct tsec_decision d;
	struct tsec_error err;

	for (;;) {
		int rc = tsec_client_check(c, &load_req, 1, &d, &err);
		if (rc == TSEC_ETIMEDOUT) {
			atomic_fetch_add(&b->timeouts, 1);
			break;
		}
		atomic_fetch_add(&b->answered, 1);
		if (rc) {
			/* The broker said it is stopping: no more calls. */
			atomic_fetch_add(&b->stopped, 1);
			break;
		}
	}
	tsec_client_close(&c);
	return NULL;
}

/* A lock.acquire's answer: its token and fence into tok, *fence. */
static void acquire_as(struct tsec_client *c, const char *name, char tok[33], long *fence)
{
	struct tsec_error err;
	char params[128], *res = NULL;
	json_t *j;

	snprintf(params, sizeof(params), "{\"name\": \"%s\", \"ttl_ms\": 600000}", name);
	if (tsec_client_call(c, "lock.acquire", params, &res, &err))
		fail_msg("acquire %s: %s", name, err.msg);
	assert_non_null(j = json_loads(res, 0, NULL));
	snprintf(tok, 33, "%s", json_string_value(json_object_get(j, "token")));
	*fence = (long)json_integer_value(json_object_get(j, "fence"));
	json_decref(j);
	free(res);
}

/*
 * Every write over the wire takes params.lock: a put_many, a move, a
 * delete and a certificate's save made by a holder the lock has left are
 * refused in the same step and change nothing (issue 17, defect 12).
 */
static void test_daemon_fenced_writes(void **state)
{
	struct tsec_client *c = client("good", 5000);
	char told[33], tnew[33], p[1024], lk_old[160], lk_new[160];
	long fold, fnew;
	struct tsec_error err;
	char *res = NULL;
	(void)state;

	acquire_as(c, "fw", told, &fold);
	snprintf(p, sizeof(p), "{\"name\": \"fw\", \"token\": \"%s\"}", told);
	assert_int_equal(tsec_client_call(c, "lock.release", p, NULL, &err), 0);
	acquire_as(c, "fw", tnew, &fnew);
	snprintf(lk_old, sizeof(lk_old), "{\"name\": \"fw\", \"token\": \"%s\", \"fence\": %ld}",
		 told, fold);
	snprintf(lk_new, sizeof(lk_new), "{\"name\": \"fw\", \"token\": \"%s\", \"fence\": %ld}",
		 tnew, fnew);
#define PUTS "\"puts\": [{\"key\": \"certificates/acme/fw/a.json\", \"value\": \"A\"}, " \
	     "{\"key\": \"certificates/acme/fw/b.json\", \"value_b64\": \"Qg==\"}]"
	snprintf(p, sizeof(p), "{" PUTS ", \"lock\": %s}", lk_old);
	assert_int_equal(tsec_client_call(c, "store.put_many", p, NULL, &err), TSEC_ENOTOWNER);
	assert_int_equal(tsec_client_call(c, "store.get",
		"{\"key\": \"certificates/acme/fw/a.json\"}", NULL, &err), TSEC_ENOENT);
	snprintf(p, sizeof(p), "{" PUTS ", \"lock\": %s}", lk_new);
	assert_int_equal(tsec_client_call(c, "store.put_many", p, NULL, &err), 0);
#undef PUTS
	snprintf(p, sizeof(p), "{\"src\": \"certificates/acme/fw/a.json\", \"dst\": "
		 "\"certificates/acme/fw/c.json\", \"lock\": %s}", lk_old);
	assert_int_equal(tsec_client_call(c, "store.move", p, NULL, &err), TSEC_ENOTOWNER);
	snprintf(p, sizeof(p), "{\"key\": \"certificates/acme/fw/b.json\", \"lock\": %s}", lk_old);
	assert_int_equal(tsec_client_call(c, "store.delete", p, NULL, &err), TSEC_ENOTOWNER);
	snprintf(p, sizeof(p), "{\"issuer\": \"acme\", \"domain\": \"fw.example\", \"cert\": "
		 "\"C\", \"key\": \"K\", \"meta\": \"{}\", \"lock\": %s}", lk_old);
	assert_int_equal(tsec_client_call(c, "store.save_cert", p, NULL, &err), TSEC_ENOTOWNER);
	/* Nothing changed; the holder's own writes are made. */
	assert_int_equal(tsec_client_call(c, "store.get",
		"{\"key\": \"certificates/acme/fw/a.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"value\":\"A\"}");
	free(res);
	assert_int_equal(tsec_client_call(c, "store.get",
		"{\"key\": \"certificates/acme/fw/b.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"value\":\"B\"}");
	free(res);
	assert_int_equal(tsec_client_call(c, "store.exists",
		"{\"key\": \"certificates/acme/fw.example/fw.example.crt\"}", &res, &err), 0);
	assert_string_equal(res, "{\"exists\":false}");
	free(res);
	snprintf(p, sizeof(p), "{\"src\": \"certificates/acme/fw/a.json\", \"dst\": "
		 "\"certificates/acme/fw/c.json\", \"lock\": %s}", lk_new);
	assert_int_equal(tsec_client_call(c, "store.move", p, NULL, &err), 0);
	snprintf(p, sizeof(p), "{\"key\": \"certificates/acme/fw/b.json\", \"lock\": %s}", lk_new);
	assert_int_equal(tsec_client_call(c, "store.delete", p, NULL, &err), 0);
	assert_int_equal(tsec_client_call(c, "store.put_many", "{\"puts\": []}", NULL, &err),
			 TSEC_EPROTO);
	snprintf(p, sizeof(p), "{\"name\": \"fw\", \"token\": \"%s\"}", tnew);
	assert_int_equal(tsec_client_call(c, "lock.release", p, NULL, &err), 0);
	tsec_client_close(&c);
}

static void test_daemon_sigterm_burst(void **state)
{
	struct burst b = { 0 };
	pthread_t th[4];
	int st;
	(void)state;

	/*
	 * The broker's table of locks taken through it is bounded (4,096):
	 * more leases than that, each ended before the next, must not crowd
	 * out the one that is live.
	 */
	long live_before = stat_of("locks_held");
	struct tsec_client *good = client("good", 3000);
	struct tsec_error err;
	char params[128], *res = NULL;
	for (int i = 0; i < 4200; i++) {
		snprintf(params, sizeof(params), "{\"name\": \"brief-%d\", \"ttl_ms\": 1}", i);
		assert_int_equal(tsec_client_call(good, "lock.acquire", params, NULL, &err), 0);
	}
	/* The broker holds a lock for a client; it must let it go.  It is
	 * taken once the last brief lease has ended and its slot is free. */
	int rc;
	TU_WAIT((rc = tsec_client_call(good, "lock.acquire",
		"{\"name\": \"held\", \"ttl_ms\": 600000}", &res, &err)) == 0);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(res, "\"fence\":"));
	free(res);
	tsec_client_close(&good);
	/* Held: the new lease and at most the live ones from before (an
	 * earlier test's lease may end meanwhile, on a slow machine). */
	{
		long now = stat_of("locks_held");
		assert_true(now >= 1 && now <= live_before + 1);
	}

	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, burst_main, &b), 0);
	/* Calls under way, then the signal. */
	TU_WAIT(atomic_load(&b.answered) >= 200);
	assert_int_equal(kill(D.pid, SIGTERM), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(waitpid(D.pid, &st, 0), D.pid);
	D.pid = -1;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(atomic_load(&b.timeouts), 0);
	assert_int_equal(atomic_load(&b.stopped), 4);
	assert_true(atomic_load(&b.answered) > 4);
	/* The lock file is gone. */
	char path[256];
	snprintf(path, sizeof(path), "%s/store/.tsec-locks/held.lock", D.dir);
	assert_int_equal(access(path, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daemon_callers),
		cmocka_unit_test(test_daemon_lock_quota),
		cmocka_unit_test(test_daemon_fenced_writes),
		cmocka_unit_test(test_daemon_unknown_key),
		cmocka_unit_test(test_daemon_metrics),
		cmocka_unit_test(test_daemon_principal_claim),
		cmocka_unit_test(test_daemon_bad_input),
		cmocka_unit_test(test_daemon_reload),
		cmocka_unit_test(test_daemon_decision_log),
		cmocka_unit_test(test_daemon_cli),
		cmocka_unit_test(test_daemon_ipc_curve),
		cmocka_unit_test(test_daemon_sigterm_burst),
	};
	return cmocka_run_group_tests_name("daemon", tests, setup, teardown);
}
