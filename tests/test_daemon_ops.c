/*
 * tsec-broker end to end, what an operator watches and does: the
 * Prometheus listener (its probes under idle and churning connections),
 * malformed and oversized messages followed by a call that still works,
 * reloads of good, bad, unsigned and tampered policies, and the decision
 * log.  The real daemon (tests/daemon_harness.c), as in test_daemon.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "tests/certgen.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/client.h"

#include "tests/daemon_harness.h"

static int connect_to(const char *hostport)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	const char *colon = strrchr(hostport, ':');
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_port = htons((uint16_t)atoi(colon + 1));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/*
 * Connections held open without asking do not lock the probes out
 * (issue 34, item 11): with 16 silent connections and 48 that sent half a
 * request, /health, /ready and /metrics still answer (before, 16 idle
 * connections filled the limit and every probe failed until they timed
 * out, 10 s later).  The silent ones never reach the listener (the kernel
 * holds them: TCP_DEFER_ACCEPT); of the half requests, the idlest were
 * closed for the probes, and counted.
 */
static void test_daemon_metrics_idle_connections(void **state)
{
	static char body[65536];
	char url[128];
	int fds[64];

	(void)state;
	for (int i = 0; i < 64; i++) {
		fds[i] = connect_to(D.metrics);
		if (i >= 16)
			assert_true(write(fds[i], "GET /health HTTP/1.1\r\nHost: x\r\n", 31) == 31);
	}
	snprintf(url, sizeof(url), "http://%s/health", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 30000), 200);
	snprintf(url, sizeof(url), "http://%s/ready", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 30000), 200);
	snprintf(url, sizeof(url), "http://%s/metrics", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 30000), 200);
	assert_non_null(strstr(body, "tsec_metrics_idle_closed_total "));
	assert_null(strstr(body, "tsec_metrics_idle_closed_total 0\n"));
	for (int i = 0; i < 64; i++)
		close(fds[i]);
}

/*
 * A probe gets its answer while connections churn (issue 52, item 6):
 * a thread keeps 64 connections open and replaces the oldest as fast as
 * it can (about 2,200 a second on the reporter's machine), so every
 * arrival evicts someone.  Before, the idlest-closes rule could pick
 * the probe itself: 2 of 12 /health probes were reset (here 1-2 of 40
 * in 5 runs of 6, the probe having asked; with that fixed, under
 * ASan 1 of 60 in 2 runs of 8, the probe closed while its request
 * waited unread).
 * Counted, not timed: each of 60 probes must be answered 200, however
 * slow the machine.
 */
struct churn {
	const char *hostport;
	atomic_bool stop;
	atomic_long opened;
};

static void *churn_run(void *arg)
{
	struct churn *c = arg;
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fds[64];

	a.sin_port = htons((uint16_t)atoi(strrchr(c->hostport, ':') + 1));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < 64; i++)
		fds[i] = -1;
	for (unsigned i = 0; !atomic_load(&c->stop); i = (i + 1) % 64) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof(a)) &&
		    errno != EINPROGRESS) {
			close(fds[i]);
			fds[i] = -1;
		}
		atomic_fetch_add(&c->opened, 1);
	}
	for (int i = 0; i < 64; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return NULL;
}

static void test_daemon_metrics_churn(void **state)
{
	struct churn c = { .hostport = D.metrics };
	char url[128], body[4096];
	pthread_t t;
	int failed = 0;

	(void)state;
	snprintf(url, sizeof(url), "http://%s/health", D.metrics);
	assert_int_equal(pthread_create(&t, NULL, churn_run, &c), 0);
	while (atomic_load(&c.opened) < 256)
		sched_yield();
	for (int i = 0; i < 60; i++) {
		long st = tu_http(url, NULL, body, sizeof(body), 60000);

		if (st != 200) {
			print_message("probe %d: %ld\n", i, st);
			failed++;
		}
	}
	atomic_store(&c.stop, true);
	pthread_join(t, NULL);
	print_message("%ld connections churned beside 60 probes\n", atomic_load(&c.opened));
	assert_int_equal(failed, 0);
}

/*
 * A connection whose request arrives after 40 silent connections were
 * opened behind it is answered (issue 52, item 6: the churn test's last
 * failure under ASan, made certain here).  The broker took the first
 * connection before its request, so the eviction saw it as the oldest
 * connection that had said nothing and closed it when the 33rd arrived.
 * The probe between them is answered only after the kernel handed the
 * listener every connection made before it, so on the old code the
 * first connection was closed by then, every run (read: 0 bytes).
 */
static void test_daemon_metrics_asks_late(void **state)
{
	static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	static char body[65536];
	struct timeval tv = { .tv_sec = 60 };
	char url[128], got[256];
	int first, fds[40];
	size_t have = 0;
	ssize_t n;

	(void)state;
	first = connect_to(D.metrics);
	for (int i = 0; i < 40; i++)
		fds[i] = connect_to(D.metrics);
	snprintf(url, sizeof(url), "http://%s/health", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 30000), 200);
	assert_int_equal(setsockopt(first, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_true(write(first, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1);
	while (have < sizeof(got) - 1 && (n = read(first, got + have, sizeof(got) - 1 - have)) > 0)
		have += (size_t)n;
	got[have] = 0;
	print_message("the late request read %zu bytes: %.15s\n", have, got);
	assert_true(have >= 12 && !strncmp(got, "HTTP/1.1 200", 12));
	close(first);
	for (int i = 0; i < 40; i++)
		close(fds[i]);
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
	/* What runs: build, module, policy (issue 20). */
	assert_non_null(strstr(body, "tsec_build_info{version=\""));
	assert_non_null(strstr(body, "tsec_policy_info{sha256=\""));
	assert_non_null(strstr(body, "# TYPE tsec_policy_revision gauge\ntsec_policy_revision "));
	assert_non_null(strstr(body, "tsec_policy_loaded_timestamp_seconds "));
	/* /health and /ready: the health answer, 200 while it is ok. */
	snprintf(url, sizeof(url), "http://%s/health", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 5000), 200);
	assert_non_null(strstr(body, "\"status\":\"ok\""));
	assert_non_null(strstr(body, "\"policy_sha256\":"));
	snprintf(url, sizeof(url), "http://%s/ready", D.metrics);
	assert_int_equal(tu_http(url, NULL, body, sizeof(body), 5000), 200);
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
	/* Framing the client library never sends: no delimiter; a JSON
	 * frame and four binary frames (three at most); a binary frame
	 * that takes the message past max_message. */
	for (int shape = 0; shape < 3; shape++) {
		void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
		int zero = 0, tmo = 3000;
		char buf[512], *blob = calloc(1, 6000);
		zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
		zmq_connect(s, D.ipc);
		zmq_send(s, shape == 0 ? "{}" : "", shape == 0 ? 2 : 0, ZMQ_SNDMORE);
		if (shape == 1)
			for (int i = 0; i < 4; i++)
				zmq_send(s, "x", 1, ZMQ_SNDMORE);
		zmq_send(s, "{\"id\": 7, \"method\": \"store.put\", \"params\": {\"key\": "
			 "\"certificates/acme/x/f.json\", \"value_frame\": 1}}", 99, ZMQ_SNDMORE);
		zmq_send(s, blob, shape == 2 ? 6000 : 1, 0);
		free(blob);
		int n;
		do {
			n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		} while (n == 0);
		assert_true(n > 0);
		buf[n < 511 ? n : 511] = '\0';
		if (!strstr(buf, shape == 2 ? "too_big" : "bad_request"))
			fail_msg("framing %d: %s", shape, buf);
		zmq_close(s);
		zmq_ctx_term(ctx);
	}
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"key\": \"certificates/acme/x/f.json\"}", &reply, &err), 0);
	assert_string_equal(reply, "{\"exists\":false}");
	free(reply);
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
	{
		/* Said as every command says a policy's error: file, line, column. */
		char says[300];

		snprintf(says, sizeof(says), "%s:1:43: /rules/0/id: ", D.policy);
		reload_rpc_says(TSEC_EPOLICY, says);
	}
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
	reload_rpc(TSEC_EROLLBACK);
	assert_false(bad_allowed());
	write_policy(policy_v2, 3);
	sign_policy();
	reload_rpc(TSEC_EROLLBACK);
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

/* The names the log's line for resource gives its certificate ("" if
 * none), from the last such line. */
static void logged_cert_names(const char *resource, char *out, size_t cap)
{
	char line[8192];
	FILE *f = fopen(D.log, "r");

	out[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		json_t *j = json_loads(line, 0, NULL), *names;

		if (j && !strcmp(json_string_value(json_object_get(j, "resource")), resource) &&
		    (names = json_object_get(json_object_get(json_object_get(j, "context"), "cert"),
					     "names")))
			snprintf(out, cap, "%s", json_string_value(json_array_get(names, 0)));
		json_decref(j);
	}
	if (f)
		fclose(f);
}

/*
 * The log reads a certificate's names from the certificate of each
 * decision (issue 36: parsed once per certificate, kept by its SHA-256):
 * one certificate, another, then the first again, each line its own.
 */
static void test_daemon_log_cert_attributes(void **state)
{
	struct tsec_client *good = client("good", 5000);
	const char *res[3] = { "certificates/acme/l1.example/l1.example.crt",
			       "certificates/acme/l2.example/l2.example.crt",
			       "certificates/acme/l3.example/l3.example.crt" };
	const char *want[3] = { "one.example", "two.example", "one.example" };
	size_t n1, n2;
	char *c1 = tu_cert("ec-p256", "one.example", -60, 86400, &n1);
	char *c2 = tu_cert("ec-p256", "two.example", -60, 86400, &n2);
	struct tsec_error err;
	(void)state;

	for (int i = 0; i < 3; i++) {
		json_t *p = json_pack("{s:[{s:s,s:s}]}", "puts", "key", res[i], "value",
				      i == 1 ? c2 : c1);
		char *text = json_dumps(p, JSON_COMPACT);

		assert_int_equal(tsec_client_call(good, "store.put_many", text, NULL, &err), 0);
		free(text);
		json_decref(p);
	}
	for (int i = 0; i < 3; i++) {
		char got[256];

		TU_WAIT((logged_cert_names(res[i], got, sizeof(got)), got[0]));
		assert_string_equal(got, want[i]);
	}
	free(c1);
	free(c2);
	tsec_client_close(&good);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daemon_metrics_idle_connections),
		cmocka_unit_test(test_daemon_metrics_churn),
		cmocka_unit_test(test_daemon_metrics_asks_late),
		cmocka_unit_test(test_daemon_metrics),
		cmocka_unit_test(test_daemon_bad_input),
		cmocka_unit_test(test_daemon_reload),
		cmocka_unit_test(test_daemon_decision_log),
		cmocka_unit_test(test_daemon_log_cert_attributes),
	};
	return cmocka_run_group_tests_name("daemon: metrics, input, reload, log", tests, setup,
					   teardown);
}
