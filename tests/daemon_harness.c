/*
 * The tsec-broker the daemon suites drive: starts the real daemon in a
 * temporary folder on ipc and tcp (keys, policies, configuration), and
 * the helpers the suites share.
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

#include "tests/daemon_harness.h"

const char *policy_v1 =
	"{\"version\": 1,\n"
	" \"floor\": [{\"id\": \"f-keys\", \"action\": [\"storage.list\"], \"resource\": [\"certificates/**/*.key\"]}],\n"
	" \"rules\": [\n"
	"  {\"id\": \"good-all\", \"effect\": \"allow\", \"principal\": [\"svc:good\"], \"action\": [\"*\"], \"resource\": [\"**\"]},\n"
	"  {\"id\": \"ipc-reads\", \"effect\": \"allow\", \"principal\": [\"role:local\"],\n"
	"   \"action\": [\"storage.load\", \"storage.exists\"], \"resource\": [\"**\"]},\n"
	"  {\"id\": \"bad-own-locks\", \"effect\": \"allow\", \"principal\": [\"svc:bad\"],\n"
	"   \"action\": [\"lock.*\"], \"resource\": [\"locks/other-*\"]}\n"
	" ]}\n";

const char *policy_v2 =
	"{\"version\": 1,\n"
	" \"rules\": [\n"
	"  {\"id\": \"good-all\", \"effect\": \"allow\", \"principal\": [\"svc:good\"], \"action\": [\"*\"], \"resource\": [\"**\"]},\n"
	"  {\"id\": \"bad-may-load\", \"effect\": \"allow\", \"principal\": [\"svc:bad\"], \"action\": [\"storage.load\"], \"resource\": [\"**\"]}\n"
	" ]}\n";

struct daemon_harness D;

void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	/* 0600: a configuration holding server_secret_key must be. */
	assert_int_equal(fchmod(fileno(f), 0600), 0);
	fputs(text, f);
	fclose(f);
}

/* Writes a policy text with a "revision" (signed policies need one and
 * never go back). */
void write_policy(const char *text, int revision)
{
	char buf[8192];

	assert_true(text[0] == '{');
	snprintf(buf, sizeof(buf), "{\"revision\": %d, %s", revision, text + 1);
	write_file(D.policy, buf);
}

void sign_policy(void)
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

int free_port(void)
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

struct tsec_client *client_within(const char *who, int timeout_ms)
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

struct tsec_client *client(const char *who, int timeout_ms)
{
	return client_within(who, timeout_ms > TU_CALL_MS ? timeout_ms : TU_CALL_MS);
}

json_t *stats(void)
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

long stat_of(const char *name)
{
	json_t *j = stats();
	long v = (long)json_integer_value(json_object_get(j, name));
	json_decref(j);
	return v;
}

void start_broker(void)
{
	pid_t parent = getpid();

	D.pid = fork();
	assert_true(D.pid >= 0);
	if (D.pid == 0) {
		tu_child_dies_with(parent);
		FILE *e = freopen(D.err, "w", stderr);
		(void)e;
		execl(TSEC_BUILD_DIR "/tsec-broker", "tsec-broker", "--config", D.config, (char *)NULL);
		_exit(127);
	}
	/* Ready when health answers (bounded wait: about 60 s; each try waits
	 * longer, for slow builds such as ThreadSanitizer's). */
	for (int i = 0; i < 200; i++) {
		struct tsec_client *c = client_within("good", i < 50 ? 50 : 500);
		struct tsec_error err;
		int rc = tsec_client_call(c, "health", NULL, NULL, &err);
		tsec_client_close(&c);
		if (rc == 0)
			return;
	}
	fail_msg("tsec-broker did not come up; see %s", D.err);
}

int harness_dir(const char *name)
{
	snprintf(D.dir, sizeof(D.dir), "/tmp/tsec-%s-XXXXXX", name);
	if (!mkdtemp(D.dir) || sodium_init() < 0)
		return -1;
	snprintf(D.policy, sizeof(D.policy), "%s/policy.json", D.dir);
	snprintf(D.config, sizeof(D.config), "%s/broker.json", D.dir);
	snprintf(D.log, sizeof(D.log), "%s/decisions.log", D.dir);
	snprintf(D.err, sizeof(D.err), "%s/broker.err", D.dir);
	snprintf(D.ipc, sizeof(D.ipc), "ipc://%s/run/tsec.sock", D.dir);
	snprintf(D.tcp, sizeof(D.tcp), "tcp://127.0.0.1:%d", free_port());
	snprintf(D.metrics, sizeof(D.metrics), "127.0.0.1:%d", free_port());
	zmq_curve_keypair(D.srv_pub, D.srv_sec);
	zmq_curve_keypair(D.good_pub, D.good_sec);
	zmq_curve_keypair(D.bad_pub, D.bad_sec);
	zmq_curve_keypair(D.unk_pub, D.unk_sec);
	crypto_sign_keypair(D.sign_pk, D.sign_sk);
	return 0;
}

int setup(void **state)
{
	char cfg[4096];
	(void)state;

	if (harness_dir("daemon"))
		return -1;
	write_policy(policy_v1, 1);
	sign_policy();
	{
		char pkhex[65];
		sodium_bin2hex(pkhex, sizeof(pkhex), D.sign_pk, 32);
		snprintf(cfg, sizeof(cfg),
			 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
			 " \"policy_public_key\": \"%s\","
			 " \"storage\": {\"backend\": \"file\", \"root\": \"%s/store\", \"cache_bytes\": 1048576},"
			 " \"decision_log\": \"%s\", \"metrics_listen\": \"%s\","
			 " \"endpoints\": [\"%s\", \"%s\"],"
			 " \"server_secret_key\": \"%s\", \"max_message\": 4096, \"workers\": 3,"
			 " \"max_locks_per_caller\": 64,"
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

int teardown(void **state)
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


const struct tsec_request load_req = {
	.action = S("storage.load"),
	.resource = S("certificates/acme/example.com/example.com.crt"),
};

int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	/*
	 * As system(), in a process group of its own, with a deadline: a
	 * command that does not finish is named, its processes' stacks are
	 * shown (tu_waitpid) and the whole group is killed, so a hung tsec
	 * fails the test that ran it instead of stalling the suite.
	 */
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		setpgid(0, 0);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	if (tu_waitpid(pid, &st) != pid) {
		fprintf(stderr, "command did not finish in %d s: %s\n", TU_WAIT_SECONDS, cmd);
		kill(-pid, SIGKILL);
		return -1;
	}
	/* Anything it left running in its group goes with it. */
	kill(-pid, SIGKILL);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A reload by RPC; want its code, and (when says) these words. */
void reload_rpc_says(int want, const char *says)
{
	struct tsec_client *good = client("good", 5000);
	struct tsec_error err;
	int rc = tsec_client_call(good, "reload", NULL, NULL, &err);
	tsec_client_close(&good);
	if (rc != want)
		fail_msg("reload: %d (%s), want %d", rc, err.msg, want);
	if (says && !strstr(err.msg, says))
		fail_msg("reload said \"%s\", not \"%s\"", err.msg, says);
}

void reload_rpc(int want)
{
	reload_rpc_says(want, NULL);
}
