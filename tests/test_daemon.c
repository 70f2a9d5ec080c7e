/*
 * tsec-broker end to end: the real daemon (tests/daemon_harness.c) driven
 * through the client library.  Callers allowed and denied, the per-caller
 * lock quota, an unknown key refused at the handshake, a payload
 * claiming another principal, lock waits, frames, batches, workers and
 * callers in turn.  What an operator watches (metrics, the decision log,
 * reloads, malformed input) is in test_daemon_ops.c.
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
	/* The refusal says why, in fields (issue 35: a Go caller tests for
	 * the rule without parsing the message). */
	assert_non_null(tsec_client_last_error(bad));
	assert_non_null(strstr(tsec_client_last_error(bad),
			       "\"rules\":[],\"reason\":\"nothing allowed it\""));
	assert_int_equal(tsec_client_call(good, "store.list",
		"{\"prefix\": \"certificates/a/b/b.key\"}", NULL, &err), TSEC_EDENIED);
	assert_non_null(strstr(tsec_client_last_error(good),
			       "\"rules\":[\"f-keys\"],\"reason\":\"forbidden by floor\""));
	assert_int_equal(tsec_client_call(good, "health", NULL, NULL, &err), 0);
	assert_null(tsec_client_last_error(good));
	char *res;
	assert_int_equal(tsec_client_call(ipc, "store.get",
		"{\"key\": \"certificates/acme/x/x.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"value\":\"{}\"}");
	free(res);
	/* A value with a NUL comes back as base64: as JSON text (\u0000)
	 * the client refused the reply, so it could never be read. */
	assert_int_equal(tsec_client_call(good, "store.put",
		"{\"key\": \"certificates/acme/x/nul.json\", \"value_b64\": \"AGEA\"}", NULL,
		&err), 0);
	assert_int_equal(tsec_client_call(good, "store.get",
		"{\"key\": \"certificates/acme/x/nul.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"value_b64\":\"AGEA\"}");
	free(res);
	/* Reload is for admin callers only. */
	assert_int_equal(tsec_client_call(bad, "reload", NULL, NULL, &err), TSEC_EDENIED);
	tsec_client_close(&good);
	tsec_client_close(&bad);
	tsec_client_close(&ipc);
}

/*
 * One caller cannot fill the broker's table of held locks (issue 17,
 * defect 14): past its quota (max_locks_per_caller, 64 in the harness) its
 * acquires are refused, with no lock taken, while another caller still
 * gets its lock; a release makes room again.
 */
#define TSEC_D_QUOTA 64 /* max_locks_per_caller as tests/daemon_harness.c sets it */

/*
 * lock.acquire of `name` (a lease of a minute; waiting wait_ms when > 0)
 * as c: its code, and on success the lock.release params that give it
 * back, into release.
 */
static int take_lock(struct tsec_client *c, const char *name, int wait_ms, char *release,
		     size_t cap, struct tsec_error *err)
{
	char params[160], *res = NULL;
	json_t *j;
	int rc;

	if (wait_ms > 0)
		snprintf(params, sizeof(params), "{\"name\": \"%s\", \"ttl_ms\": 60000,"
			 " \"timeout_ms\": %d}", name, wait_ms);
	else
		snprintf(params, sizeof(params), "{\"name\": \"%s\", \"ttl_ms\": 60000}", name);
	if ((rc = tsec_client_call(c, "lock.acquire", params, &res, err)))
		return rc;
	assert_non_null(j = json_loads(res, 0, NULL));
	snprintf(release, cap, "{\"name\": \"%s\", \"token\": \"%s\"}", name,
		 json_string_value(json_object_get(j, "token")));
	json_decref(j);
	free(res);
	return 0;
}

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
	assert_int_equal(take_lock(bad, "other-1", 0, params, sizeof(params), &err), 0);
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

/*
 * A lease that ended frees its place in the table and in the caller's
 * quota without a release (the table keeps only the locks held, issue
 * 36: no walk over its whole capacity): a caller at its quota of short
 * leases gets a new lock once they have ended.
 */
static void test_daemon_lock_quota_expiry(void **state)
{
	struct tsec_client *good = client("good", 5000);
	struct tsec_error err;
	char params[160];
	int rc;
	(void)state;

	for (int i = 0; i < TSEC_D_QUOTA; i++) {
		snprintf(params, sizeof(params), "{\"name\": \"short-%d\", \"ttl_ms\": 1000}", i);
		if (tsec_client_call(good, "lock.acquire", params, NULL, &err))
			fail_msg("acquire %d: %s", i, err.msg);
	}
	/* Refused while they last (if the machine was slow enough for the
	 * first to end already, the wait below decides alone). */
	rc = tsec_client_call(good, "lock.acquire",
		"{\"name\": \"short-over\", \"ttl_ms\": 60000}", NULL, &err);
	if (rc == TSEC_EBUSY) {
		assert_non_null(strstr(err.msg, "max_locks_per_caller"));
		TU_WAIT((rc = tsec_client_call(good, "lock.acquire",
			"{\"name\": \"short-over\", \"ttl_ms\": 60000}", NULL, &err)) == 0);
	}
	assert_int_equal(rc, 0);
	tsec_client_close(&good);
}

/*
 * The host's signals do not fail a call (issue 35): Go's runtime
 * preempts a thread in a cgo call with SIGURG, and calls failed with
 * "send: Interrupted system call".  Every call made while the calling
 * thread takes signals as fast as another thread can send them must
 * succeed.
 */
/* A failed assertion must not leave the signals on for the next tests. */
static int stop_interrupting(void **state)
{
	(void)state;
	tu_interrupt_stop();
	return 0;
}

/* This process's threads. */
static int threads_now(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void test_daemon_calls_survive_signals(void **state)
{
	struct tsec_client *good = client("good", 10000);
	struct tsec_error err;
	(void)state;

	tu_interrupt_start();
	for (int i = 0; i < 2000; i++) {
		int rc = tsec_client_call(good, i % 2 ? "health" : "store.exists",
					  "{\"key\": \"certificates/acme/x/x.json\"}", NULL, &err);
		if (rc) {
			tu_interrupt_stop();
			fail_msg("call %d under signals: %s", i, err.msg);
		}
	}
	assert_true(tu_interrupt_stop() > 0);
	tsec_client_close(&good);
	/* Nor do they leave a closed client's ZeroMQ threads running
	 * (zmq_ctx_term, interrupted, is made again). */
	int before = threads_now();
	tu_interrupt_start();
	for (int i = 0; i < 100; i++) {
		struct tsec_client *c = client("good", 10000);

		if (tsec_client_call(c, "health", NULL, NULL, &err)) {
			tu_interrupt_stop();
			fail_msg("call under signals: %s", err.msg);
		}
		tsec_client_close(&c);
	}
	assert_true(tu_interrupt_stop() > 0);
	TU_WAIT(threads_now() <= before);
	assert_int_equal(threads_now(), before);
}

static void test_daemon_unknown_key(void **state)
{
	long before = stat_of("zap_refused");
	struct tsec_client *unk = client("unknown", 400);
	struct tsec_error err;
	(void)state;

	/* Told apart from a timeout: the broker refused the key. */
	assert_int_equal(tsec_client_call(unk, "health", NULL, NULL, &err), TSEC_EAUTH);
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

/*
 * A DEL in a caller's id comes back escaped (\u007F) whichever way the
 * broker writes the reply: the tree-less Check path always did, the
 * replies written with jansson (every other method, every error) sent
 * the raw byte before.
 */
static void test_daemon_del_in_id(void **state)
{
	static const char *msgs[] = {
		"{\"id\": \"a\x7f\", \"method\": \"health\"}",
		"{\"id\": \"a\x7f\", \"method\": \"no.such.method\"}",
		"{\"id\": \"a\x7f\", \"method\": \"check\", \"params\": {\"requests\": []}}",
		"{\"id\": \"a\x7f\", \"method\": \"check\", \"params\": {\"requests\": "
		"[{\"action\": \"storage.load\", \"resource\": \"certificates/a/b/b.crt\"}]}}",
		"{\"id\": [\"a\x7f\"], \"method\": \"health\"}",
	};
	struct tsec_client *good = client("good", 3000);
	struct tsec_error err;
	char *reply;
	(void)state;

	for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
		assert_int_equal(tsec_client_raw(good, msgs[i], strlen(msgs[i]), &reply, &err), 0);
		if (strchr(reply, 0x7f) || !strstr(reply, "a\\u007F"))
			fail_msg("message %zu: %s", i, reply);
		free(reply);
	}
	tsec_client_close(&good);
}

/* Whether thread tid of the broker blocks SIGHUP (its SigBlk mask), and
 * its name into name. */
static bool blocks_sighup(int tid, char name[32])
{
	char path[96], line[256];
	unsigned long long mask = 0;
	FILE *f;

	name[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)D.pid, tid);
	if (!(f = fopen(path, "r")))
		return true; /* ended meanwhile */
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Name: %31s", name) != 1 &&
		    sscanf(line, "SigBlk: %llx", &mask) == 1)
			break;
	fclose(f);
	return mask & (1ull << (SIGHUP - 1));
}

/*
 * A SIGHUP that lands on another thread than the loop's: every thread
 * either blocks it (the workers, the ZAP thread and ZeroMQ's own do) or
 * takes it for the loop (a reload each), and every worker still answers
 * after.  A worker's wait cut short by a signal used to end that worker,
 * and calls then waited on workers that were gone.
 */
static void test_daemon_signal_elsewhere(void **state)
{
	struct tsec_client *ipc = client("ipc", 5000);
	char path[64];
	struct dirent *e;
	struct tsec_error err;
	long want = stat_of("reloads");
	int workers = 0, zap = 0;
	DIR *dir;
	(void)state;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)D.pid);
	assert_non_null(dir = opendir(path));
	while ((e = readdir(dir))) {
		int tid = atoi(e->d_name);
		char name[32];
		bool blocks;

		if (tid <= 0 || tid == (int)D.pid)
			continue;
		blocks = blocks_sighup(tid, name);
		workers += !strcmp(name, "tsec-worker") && blocks;
		zap += !strcmp(name, "tsec-zap") && blocks;
		if (blocks)
			continue;
		/* One at a time: two pending SIGHUPs would be one. */
		if (syscall(SYS_tgkill, (int)D.pid, tid, SIGHUP) != 0)
			continue; /* a thread that ended meanwhile */
		want++;
		TU_WAIT(stat_of("reloads") >= want);
		assert_int_equal(stat_of("reloads"), want);
	}
	closedir(dir);
	assert_int_equal(workers, 3);
	assert_int_equal(zap, 1);
	/* Each store call goes to a worker; more calls than workers, so a
	 * worker that was gone would hold one. */
	for (int i = 0; i < 12; i++)
		assert_int_equal(tsec_client_call(ipc, "store.exists",
			"{\"key\": \"certificates/acme/x/x.json\"}", NULL, &err), 0);
	tsec_client_close(&ipc);
}

/* One waiter of test_daemon_lock_waits: acquire (waiting), then release. */
struct waiter {
	pthread_t t;
	const char *who;
	int wait_ms;
	int acquired, released;
	char msg[sizeof(((struct tsec_error *)0)->msg)];
};

static void *wait_for_lock(void *arg)
{
	struct waiter *w = arg;
	struct tsec_client *c = client(w->who, 120000);
	struct tsec_error err;
	char release[160];

	w->acquired = take_lock(c, "other-parked", w->wait_ms, release, sizeof(release), &err);
	snprintf(w->msg, sizeof(w->msg), "%s", w->acquired ? err.msg : "");
	if (!w->acquired)
		w->released = tsec_client_call(c, "lock.release", release, NULL, &err);
	tsec_client_close(&c);
	return NULL;
}

/*
 * Callers waiting for a held lock hold no worker: with more waiters than
 * workers (3), storage calls are still answered at once, every waiter
 * gets the lock in turn once it is free, and a waiter whose deadline
 * passes hears "timed out".  Before, each waiting lock.acquire held a
 * worker for its whole wait, so a few waiters stalled every storage call
 * of every caller for up to 30 s.
 */
static void test_daemon_lock_waits(void **state)
{
	struct tsec_client *good = client("good", 10000);
	struct waiter w[6] = {
		{ .who = "bad", .wait_ms = 60000 }, { .who = "good", .wait_ms = 60000 },
		{ .who = "bad", .wait_ms = 60000 }, { .who = "good", .wait_ms = 60000 },
		{ .who = "bad", .wait_ms = 60000 }, { .who = "good", .wait_ms = 1 },
	};
	struct tsec_error err;
	char params[160];
	(void)state;

	assert_int_equal(take_lock(good, "other-parked", 0, params, sizeof(params), &err), 0);
	/* The short one first: its deadline passes while the lock is held. */
	assert_int_equal(pthread_create(&w[5].t, NULL, wait_for_lock, &w[5]), 0);
	assert_int_equal(pthread_join(w[5].t, NULL), 0);
	assert_int_equal(w[5].acquired, TSEC_ETIMEDOUT);
	for (int i = 0; i < 5; i++)
		assert_int_equal(pthread_create(&w[i].t, NULL, wait_for_lock, &w[i]), 0);
	TU_WAIT(stat_of("lock_waits") == 5);
	assert_int_equal(stat_of("lock_waits"), 5);
	/* Five waiting, three workers: storage still answers. */
	for (int i = 0; i < 6; i++) {
		assert_int_equal(tsec_client_call(good, "store.put",
			"{\"key\": \"certificates/acme/w/w.json\", \"value\": \"{}\"}", NULL, &err), 0);
		assert_int_equal(tsec_client_call(good, "store.get",
			"{\"key\": \"certificates/acme/w/w.json\"}", NULL, &err), 0);
	}
	assert_int_equal(stat_of("lock_waits"), 5);
	/* Freed: each waiter takes it in turn and lets it go. */
	assert_int_equal(tsec_client_call(good, "lock.release", params, NULL, &err), 0);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(pthread_join(w[i].t, NULL), 0);
		if (w[i].acquired)
			fail_msg("waiter %d: %s", i, w[i].msg);
		assert_int_equal(w[i].released, 0);
	}
	assert_int_equal(stat_of("lock_waits"), 0);
	tsec_client_close(&good);
}

/* The store's commit flock, held by this test so that every write waits
 * in its worker; a test that failed holding it does not leave the next
 * one stuck: each takes it through hold_commit, which lets go first. */
static int commit_fd = -1;

static void hold_commit(void)
{
	char path[256];

	if (commit_fd >= 0)
		close(commit_fd);
	snprintf(path, sizeof(path), "%s/store/.tsec-journal/.tsec-commit", D.dir);
	assert_true((commit_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) >= 0);
	assert_int_equal(flock(commit_fd, LOCK_EX), 0);
}

static void let_commit_go(void)
{
	close(commit_fd);
	commit_fd = -1;
}

/* The broker's stats as text, for a failure's message (not freed: the
 * test ends there). */
static char *stats_text(void)
{
	json_t *j = stats();
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	return s ? s : "no stats";
}

/* A store.put_many of two values as "good": its answer's code. */
static void *put_two(void *arg)
{
	struct tsec_client *c = client("good", 120000);
	struct tsec_error err;

	*(int *)arg = tsec_client_call(c, "store.put_many", "{\"puts\": ["
		"{\"key\": \"certificates/acme/full/a.json\", \"value\": \"A\"},"
		"{\"key\": \"certificates/acme/full/b.json\", \"value\": \"B\"}]}", NULL, &err);
	tsec_client_close(&c);
	return NULL;
}

/* The next answer on a raw DEALER (its delimiter skipped), as a string. */
static void next_reply(void *s, char *buf, size_t cap)
{
	int n;

	do {
		n = zmq_recv(s, buf, cap - 1, 0);
	} while (n == 0);
	assert_true(n > 0);
	buf[(size_t)n < cap ? (size_t)n : cap - 1] = '\0';
}

static long put_many_calls(void)
{
	json_t *j = stats();
	long v = (long)json_integer_value(json_object_get(json_object_get(j, "by_method"),
							  "store.put_many"));

	json_decref(j);
	return v;
}

/*
 * store.exists with "keys": a renewal's three files in one call (issue
 * 36: the turn's exists were three round trips to the backend), each
 * answered as a file; a bad list or a denied key fails the whole call.
 */
static void test_daemon_exists_keys(void **state)
{
	struct tsec_client *good = client("good", 5000), *bad = client("bad", 5000);
	struct tsec_error err;
	char *res = NULL;
	(void)state;

	assert_int_equal(tsec_client_call(good, "store.put",
		"{\"key\": \"certificates/acme/many/a.crt\", \"value\": \"A\"}", NULL, &err), 0);
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"keys\": [\"certificates/acme/many/a.crt\", \"certificates/acme/many/b.key\","
		" \"certificates/acme/many\"]}", &res, &err), 0);
	assert_string_equal(res, "{\"exists\":[true,false,false]}");
	free(res);
	assert_int_equal(tsec_client_call(good, "store.exists", "{\"keys\": []}", NULL, &err),
			 TSEC_EINVAL);
	assert_int_equal(tsec_client_call(good, "store.exists", "{\"keys\": \"x\"}", NULL, &err),
			 TSEC_EINVAL);
	assert_int_equal(tsec_client_call(good, "store.exists", "{\"keys\": [1]}", NULL, &err),
			 TSEC_EINVAL);
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"keys\": [\"a/1\",\"a/2\",\"a/3\",\"a/4\",\"a/5\",\"a/6\",\"a/7\",\"a/8\","
		"\"a/9\"]}", NULL, &err), TSEC_EINVAL);
	assert_int_equal(tsec_client_call(bad, "store.exists",
		"{\"keys\": [\"certificates/acme/many/a.crt\"]}", &res, &err), TSEC_EDENIED);
	assert_null(res);
	tsec_client_close(&good);
	tsec_client_close(&bad);
}

/*
 * Values as binary frames beside the JSON, each way (issue 36: jansson
 * was 68% of a renewal turn's instructions, most of it certificates
 * escaped into and out of JSON strings).  Any bytes go through whole
 * (a NUL, 0xff, no UTF-8), to a worker and from the loop's cache; a
 * caller without frames still reads them as JSON.  A frame named twice,
 * named but absent, never named, sent to a method that takes none, or
 * one too many is refused with nothing written.
 */
static void test_daemon_frames(void **state)
{
	struct tsec_client *good = client("good", 5000), *bad = client("bad", 5000);
	static const unsigned char bin[6] = { 'a', 0, 0xff, '\n', '"', 0x7f };
	char pem[3000], *res = NULL;
	const struct tsec_client_frame one[1] = { { bin, sizeof(bin) } };
	struct tsec_client_frame three[3] = { { pem, sizeof(pem) }, { "KEY", 3 }, { "{}", 2 } };
	struct tsec_client_frame got[TSEC_CLIENT_MAX_FRAMES];
	struct tsec_error err;
	size_t n = 9;
	(void)state;

	for (size_t i = 0; i < sizeof(pem); i++)
		pem[i] = i % 65 == 64 ? '\n' : (char)('A' + i % 26);
	/* store.put and store.get, twice: a worker's, then the cache's. */
	assert_int_equal(tsec_client_call_frames(good, "store.put",
		"{\"key\": \"certificates/acme/fr/bin.json\", \"value_frame\": 1}", one, 1, NULL,
		NULL, NULL, &err), 0);
	for (int pass = 0; pass < 2; pass++) {
		assert_int_equal(tsec_client_call_frames(good, "store.get",
			"{\"key\": \"certificates/acme/fr/bin.json\"}", NULL, 0, &res, got, &n, &err), 0);
		assert_string_equal(res, "{\"value_frame\":1}");
		free(res);
		assert_int_equal(n, 1);
		assert_int_equal(got[0].len, sizeof(bin));
		assert_memory_equal(got[0].data, bin, sizeof(bin));
		tsec_client_frames_free(got, n);
	}
	/* Without frames: base64, as before. */
	assert_int_equal(tsec_client_call(good, "store.get",
		"{\"key\": \"certificates/acme/fr/bin.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"value_b64\":\"YQD/CiJ/\"}");
	free(res);
	/* A certificate's three files, saved and loaded as frames. */
	assert_int_equal(tsec_client_call_frames(good, "store.save_cert",
		"{\"issuer\": \"acme\", \"domain\": \"fr.example\", \"cert_frame\": 1,"
		" \"key_frame\": 2, \"meta_frame\": 3}", three, 3, NULL, NULL, NULL, &err), 0);
	assert_int_equal(tsec_client_call_frames(good, "store.load_cert",
		"{\"issuer\": \"acme\", \"domain\": \"fr.example\"}", NULL, 0, &res, got, &n, &err), 0);
	assert_string_equal(res, "{\"cert_frame\":1,\"key_frame\":2,\"meta_frame\":3}");
	free(res);
	assert_int_equal(n, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(got[i].len, three[i].len);
		assert_memory_equal(got[i].data, three[i].data, three[i].len);
	}
	tsec_client_frames_free(got, n);
	assert_null(got[0].data);
	/* The same files as JSON for a caller that did not ask for frames. */
	assert_int_equal(tsec_client_call(good, "store.load_cert",
		"{\"issuer\": \"acme\", \"domain\": \"fr.example\"}", &res, &err), 0);
	assert_non_null(strstr(res, "\"key\":\"KEY\",\"meta\":\"{}\""));
	free(res);
	/* A string and a frame in one call; store.put_many's puts too. */
	assert_int_equal(tsec_client_call_frames(good, "store.put_many",
		"{\"puts\": [{\"key\": \"certificates/acme/fr/a.json\", \"value\": \"A\"},"
		" {\"key\": \"certificates/acme/fr/b.json\", \"value_frame\": 1}]}", one, 1, NULL,
		NULL, NULL, &err), 0);
	assert_int_equal(tsec_client_call_frames(good, "store.get",
		"{\"key\": \"certificates/acme/fr/b.json\"}", NULL, 0, NULL, got, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_memory_equal(got[0].data, bin, sizeof(bin));
	tsec_client_frames_free(got, n);
	/* Refused, nothing written: a frame named twice, named and absent,
	 * never named; frames to a method that takes none. */
	assert_int_equal(tsec_client_call_frames(good, "store.save_cert",
		"{\"issuer\": \"acme\", \"domain\": \"fr2.example\", \"cert_frame\": 1,"
		" \"key_frame\": 1, \"meta_frame\": 2}", three, 2, NULL, NULL, NULL, &err),
		TSEC_EPROTO);
	assert_non_null(strstr(err.msg, "named twice"));
	assert_int_equal(tsec_client_call_frames(good, "store.put",
		"{\"key\": \"certificates/acme/fr/c.json\", \"value_frame\": 2}", one, 1, NULL,
		NULL, NULL, &err), TSEC_EPROTO);
	assert_int_equal(tsec_client_call_frames(good, "store.put",
		"{\"key\": \"certificates/acme/fr/c.json\", \"value_frame\": 0}", one, 1, NULL,
		NULL, NULL, &err), TSEC_EPROTO);
	assert_int_equal(tsec_client_call_frames(good, "store.put",
		"{\"key\": \"certificates/acme/fr/c.json\", \"value\": \"C\"}", one, 1, NULL,
		NULL, NULL, &err), TSEC_EPROTO);
	assert_non_null(strstr(err.msg, "no \"_frame\" member names"));
	assert_int_equal(tsec_client_call_frames(good, "store.put",
		"{\"key\": \"certificates/acme/fr/c.json\", \"value_frame\": 1}", NULL, 0, NULL,
		NULL, NULL, &err), TSEC_EPROTO);
	assert_int_equal(tsec_client_call_frames(good, "store.delete",
		"{\"key\": \"certificates/acme/fr/bin.json\"}", one, 1, NULL, NULL, NULL, &err),
		TSEC_EPROTO);
	assert_int_equal(tsec_client_call_frames(good, "check",
		"{\"requests\": []}", one, 1, NULL, NULL, NULL, &err), TSEC_EPROTO);
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"keys\": [\"certificates/acme/fr/c.json\", \"certificates/acme/fr/bin.json\"]}",
		&res, &err), 0);
	assert_string_equal(res, "{\"exists\":[false,true]}");
	free(res);
	assert_int_equal(tsec_client_call(good, "store.load_cert",
		"{\"issuer\": \"acme\", \"domain\": \"fr2.example\"}", NULL, &err), TSEC_ENOENT);
	/* The client refuses a fourth frame before sending anything. */
	{
		struct tsec_client_frame four[4] = { { "a", 1 }, { "b", 1 }, { "c", 1 }, { "d", 1 } };

		assert_int_equal(tsec_client_call_frames(good, "store.put", "{}", four, 4, NULL,
							 NULL, NULL, &err), TSEC_EINVAL);
	}
	/* A denied caller's frames are refused with the call: no value. */
	assert_int_equal(tsec_client_call_frames(bad, "store.get",
		"{\"key\": \"certificates/acme/fr/bin.json\"}", NULL, 0, &res, got, &n, &err),
		TSEC_EDENIED);
	assert_int_equal(n, 0);
	assert_null(res);
	tsec_client_close(&good);
	tsec_client_close(&bad);
}

/*
 * Several storage calls in one message (issue 36: a renewal turn in two
 * round trips, not five): run in order, one result each, the first
 * failure the last to run; frames named across the calls, each once.
 * Refused whole, with nothing run: no calls, too many, a batch inside,
 * a call that is not storage or locks, a frame named twice or by none.
 * A refused call says which rule refused it, as alone.
 */
static void test_daemon_batch(void **state)
{
	struct tsec_client *good = client("good", 5000), *bad = client("bad", 5000);
	const struct tsec_client_frame three[3] = { { "CRT", 3 }, { "KEY", 3 }, { "{}", 2 } };
	struct tsec_client_frame got[TSEC_CLIENT_MAX_FRAMES];
	struct tsec_error err;
	char *res = NULL, p[1024];
	json_t *j;
	size_t n;
	(void)state;

	assert_int_equal(tsec_client_call_frames(good, "batch",
		"{\"calls\": [{\"method\": \"lock.acquire\", \"params\": {\"name\": \"b.example\","
		" \"ttl_ms\": 60000}}, {\"method\": \"store.exists\", \"params\": {\"keys\":"
		" [\"certificates/acme/b.example/b.example.crt\"]}}, {\"method\": \"store.save_cert\","
		" \"params\": {\"issuer\": \"acme\", \"domain\": \"b.example\", \"cert_frame\": 1,"
		" \"key_frame\": 2, \"meta_frame\": 3}}]}", three, 3, &res, NULL, NULL, &err), 0);
	assert_non_null(j = json_loads(res, 0, NULL));
	free(res);
	assert_int_equal(json_array_size(json_object_get(j, "results")), 3);
	res = json_dumps(json_object_get(json_array_get(json_object_get(j, "results"), 1),
					 "result"), JSON_COMPACT);
	assert_string_equal(res, "{\"exists\":[false]}");
	free(res);
	snprintf(p, sizeof(p), "{\"calls\": [{\"method\": \"lock.release\", \"params\": {\"name\":"
		 " \"b.example\", \"token\": \"%s\"}}, {\"method\": \"store.load_cert\", \"params\":"
		 " {\"issuer\": \"acme\", \"domain\": \"b.example\"}}]}",
		 json_string_value(json_object_get(json_object_get(json_array_get(
			 json_object_get(j, "results"), 0), "result"), "token")));
	json_decref(j);
	assert_int_equal(tsec_client_call_frames(good, "batch", p, NULL, 0, &res, got, &n, &err), 0);
	assert_string_equal(res, "{\"results\":[{\"result\":{}},{\"result\":{\"cert_frame\":1,"
			    "\"key_frame\":2,\"meta_frame\":3}}]}");
	free(res);
	assert_int_equal(n, 3);
	assert_memory_equal(got[0].data, "CRT", 3);
	assert_memory_equal(got[1].data, "KEY", 3);
	tsec_client_frames_free(got, n);
	/* The first failure ends it: the put after it does not run. */
	assert_int_equal(tsec_client_call(good, "batch",
		"{\"calls\": [{\"method\": \"store.get\", \"params\": {\"key\":"
		" \"certificates/acme/b.example/none.json\"}}, {\"method\": \"store.put\", \"params\":"
		" {\"key\": \"certificates/acme/b.example/after.json\", \"value\": \"x\"}}]}",
		&res, &err), 0);
	assert_non_null(strstr(res, "\"code\":\"not_found\""));
	assert_null(strstr(res, "\"result\""));
	free(res);
	/* Refused whole: nothing of it runs (the put first in each). */
	{
		static const char *const refused[] = {
			"{\"calls\": []}",
			"{\"calls\": {}}",
			"{\"calls\": [{\"method\": \"store.put\", \"params\": {\"key\": "
			"\"certificates/acme/b.example/after.json\", \"value\": \"x\"}}, {\"method\":"
			" \"batch\", \"params\": {\"calls\": []}}]}",
			"{\"calls\": [{\"method\": \"store.put\", \"params\": {\"key\": "
			"\"certificates/acme/b.example/after.json\", \"value\": \"x\"}}, {\"method\":"
			" \"check\", \"params\": {\"requests\": []}}]}",
			"{\"calls\": [{\"method\": \"store.put\", \"params\": {\"key\": "
			"\"certificates/acme/b.example/after.json\", \"value_frame\": 1}}, {\"method\":"
			" \"store.put\", \"params\": {\"key\": \"certificates/acme/b.example/c.json\","
			" \"value_frame\": 1}}]}",
			"{\"calls\": [{\"method\": \"store.put\", \"params\": {\"key\": "
			"\"certificates/acme/b.example/after.json\", \"value\": \"x\"}}]}",
			"{\"calls\": [1,2,3,4,5,6,7,8,9]}",
		};

		for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
			int rc = tsec_client_call_frames(good, "batch", refused[i], three,
							 i == 4 || i == 5 ? 1 : 0, NULL, NULL,
							 NULL, &err);

			if (rc != TSEC_EPROTO)
				fail_msg("refused[%zu]: %d %s", i, rc, err.msg);
		}
		assert_int_equal(tsec_client_call(good, "store.exists",
			"{\"key\": \"certificates/acme/b.example/after.json\"}", &res, &err), 0);
		assert_string_equal(res, "{\"exists\":false}");
		free(res);
	}
	/* A lock.acquire in a batch only tries: held, it answers busy at
	 * once (no worker waits out its timeout_ms) and ends the batch. */
	assert_int_equal(tsec_client_call(good, "lock.acquire",
		"{\"name\": \"held.example\", \"ttl_ms\": 60000}", &res, &err), 0);
	assert_non_null(j = json_loads(res, 0, NULL));
	free(res);
	/* The client waits 5 s, the broker would wait up to
	 * TSEC_D_LOCK_WAIT_MAX_MS: an answer at all says it did not. */
	assert_int_equal(tsec_client_call(good, "batch",
		"{\"calls\": [{\"method\": \"lock.acquire\", \"params\": {\"name\":"
		" \"held.example\", \"ttl_ms\": 60000, \"timeout_ms\": 600000}},"
		" {\"method\": \"store.put\", \"params\": {\"key\":"
		" \"certificates/acme/b.example/after.json\", \"value\": \"x\"}}]}",
		&res, &err), 0);
	assert_non_null(strstr(res, "\"code\":\"busy\""));
	assert_null(strstr(res, "\"result\""));
	free(res);
	snprintf(p, sizeof(p), "{\"name\": \"held.example\", \"token\": \"%s\"}",
		 json_string_value(json_object_get(j, "token")));
	json_decref(j);
	assert_int_equal(tsec_client_call(good, "lock.release", p, &res, &err), 0);
	free(res);
	/* A refusal inside says why, as alone. */
	assert_int_equal(tsec_client_call(bad, "batch",
		"{\"calls\": [{\"method\": \"store.put\", \"params\": {\"key\":"
		" \"certificates/acme/b.example/x.json\", \"value\": \"x\"}}]}", &res, &err), 0);
	assert_non_null(strstr(res, "\"code\":\"denied\""));
	assert_non_null(strstr(res, "\"reason\":\"nothing allowed it\""));
	free(res);
	tsec_client_close(&good);
	tsec_client_close(&bad);
}

/*
 * A store.get or store.exists the LocalCache can answer is answered on
 * the loop (issue
 * 36: no worker hand-off, two thread wake-ups fewer), so it is answered
 * even while every worker is stuck (here on the commit flock this test
 * holds), the policy asked and logged as a worker would: a caller the
 * policy refuses is refused there too.  A miss still goes to a worker.
 * Before, every get waited for a worker.
 */
static void test_daemon_get_hit_on_loop(void **state)
{
	struct tsec_client *good = client("good", 5000), *bad = client("bad", 5000);
	int rc[3] = { 1, 1, 1 };
	long before = put_many_calls(), answered;
	struct tsec_error err;
	pthread_t t[3];
	char *res = NULL;
	(void)state;

	assert_int_equal(tsec_client_call(good, "store.put",
		"{\"key\": \"certificates/acme/hit/hit.json\", \"value\": \"H\"}", NULL, &err), 0);
	assert_int_equal(tsec_client_call(good, "store.get",
		"{\"key\": \"certificates/acme/hit/hit.json\"}", NULL, &err), 0);
	answered = stat_of("cache_answered");
	hold_commit();
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, put_two, &rc[i]), 0);
	TU_WAIT(put_many_calls() == before + 3);
	assert_int_equal(put_many_calls(), before + 3);
	/* Every worker waits on the flock: a hit is answered all the same. */
	if (tsec_client_call(good, "store.get", "{\"key\": \"certificates/acme/hit/hit.json\"}",
			     &res, &err))
		fail_msg("a cached get while the workers are stuck: %s", err.msg);
	assert_string_equal(res, "{\"value\":\"H\"}");
	free(res);
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"key\": \"certificates/acme/hit/hit.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"exists\":true}");
	free(res);
	assert_int_equal(tsec_client_call(bad, "store.get",
		"{\"key\": \"certificates/acme/hit/hit.json\"}", &res, &err), TSEC_EDENIED);
	assert_null(res);
	assert_int_equal(stat_of("cache_answered"), answered + 3);
	let_commit_go();
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(rc[i], 0);
	}
	/* A store.get naming another principal is refused once: counted
	 * once, not again by a worker after the loop looked at it. */
	{
		const char *claim = "{\"id\": 9, \"method\": \"store.get\", \"principal\": "
				    "\"svc:bad\", \"params\": {\"key\": \"certificates/acme/hit/hit.json\"}}";
		long mism = stat_of("principal_mismatch"), errs = stat_of("errors");

		assert_int_equal(tsec_client_raw(good, claim, strlen(claim), &res, &err), 0);
		assert_non_null(strstr(res, "another principal"));
		free(res);
		assert_int_equal(stat_of("principal_mismatch"), mism + 1);
		assert_int_equal(stat_of("errors"), errs + 1);
	}
	/* A miss goes to a worker, and says so. */
	assert_int_equal(tsec_client_call(good, "store.get",
		"{\"key\": \"certificates/acme/hit/none.json\"}", NULL, &err), TSEC_ENOENT);
	assert_int_equal(tsec_client_call(good, "store.exists",
		"{\"key\": \"certificates/acme/hit/none.json\"}", &res, &err), 0);
	assert_string_equal(res, "{\"exists\":false}");
	free(res);
	assert_int_equal(stat_of("cache_answered"), answered + 3);
	tsec_client_close(&good);
	tsec_client_close(&bad);
}

/*
 * Workers that cannot move (all three wait on the store's commit flock,
 * which this test holds) never stop the loop: it holds one caller's
 * share of calls for them (1,024) and answers the rest "busy" at once,
 * and a Check is still answered.  Before, the loop sent to the workers
 * with ZeroMQ's high-water marks (about 2,000 a worker), then blocked in
 * the send, and every caller's Check waited with it.
 */
static void test_daemon_workers_full(void **state)
{
	enum { FLOOD = 5000, SHARE = 1024 }; /* TSEC_D_QUEUED_PER_CALLER */
	struct tsec_client *good = client("good", 10000);
	char msg[160], buf[512];
	int rc[3] = { 1, 1, 1 }, zero = 0, tmo = 60000, ok = 0, busy = 0;
	long before = put_many_calls();
	struct tsec_decision d;
	struct tsec_error err;
	pthread_t t[3];
	void *ctx, *s;
	(void)state;

	hold_commit();
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, put_two, &rc[i]), 0);
	/* Each in a worker of its own, waiting on the flock. */
	TU_WAIT(put_many_calls() == before + 3);
	assert_int_equal(put_many_calls(), before + 3);

	ctx = zmq_ctx_new();
	s = zmq_socket(ctx, ZMQ_DEALER);
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	assert_int_equal(zmq_connect(s, D.ipc), 0);
	for (int i = 0; i < FLOOD; i++) {
		int n = snprintf(msg, sizeof(msg), "{\"id\": %d, \"method\": \"store.exists\", "
				 "\"params\": {\"key\": \"certificates/acme/full/a.json\"}}", i);
		assert_int_equal(zmq_send(s, "", 0, ZMQ_SNDMORE), 0);
		assert_int_equal(zmq_send(s, msg, (size_t)n, 0), n);
	}
	/* The loop answers the ones past the cap at once... */
	for (int i = 0; i < FLOOD - SHARE; i++) {
		next_reply(s, buf, sizeof(buf));
		if (!strstr(buf, "\"busy\""))
			fail_msg("reply %d while the workers are stuck: %s (%s)", i, buf,
				 stats_text());
		busy++;
	}
	assert_int_equal(stat_of("calls_queued"), SHARE);
	/* ...and still decides. */
	assert_int_equal(tsec_client_check(good, &load_req, 1, &d, &err), 0);
	assert_int_equal(d.status, TSEC_STATUS_ALLOWED);
	/* Free: the 1,024 it took are answered. */
	let_commit_go();
	while (ok < SHARE) {
		next_reply(s, buf, sizeof(buf));
		if (!strstr(buf, "\"exists\":true"))
			fail_msg("reply %d after the workers moved: %s (%s)", ok, buf, stats_text());
		ok++;
	}
	assert_int_equal(busy, FLOOD - SHARE);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(rc[i], 0);
	}
	zmq_close(s);
	zmq_ctx_term(ctx);
	tsec_client_close(&good);
}

/* A raw DEALER to the broker as "good" (CURVE over tcp) or over ipc. */
static void *raw_dealer(void *ctx, bool curve)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	int zero = 0, tmo = 60000;

	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	if (curve) {
		zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, D.srv_pub, 40);
		zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, D.good_pub, 40);
		zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, D.good_sec, 40);
	}
	assert_int_equal(zmq_connect(s, curve ? D.tcp : D.ipc), 0);
	return s;
}

static void raw_send(void *s, const char *msg)
{
	assert_int_equal(zmq_send(s, "", 0, ZMQ_SNDMORE), 0);
	assert_int_equal(zmq_send(s, msg, strlen(msg), 0), (int)strlen(msg));
}

/*
 * Callers are served in turn: while one caller has 60 slow calls queued,
 * another's call is the next but one to reach a worker, not the 58th.
 * Told from the decision log, whose lines come in the order the workers
 * asked the policy (so this holds on a machine of any speed).  Before,
 * the workers took calls first come, first served.
 */
static void test_daemon_callers_in_turn(void **state)
{
	enum { PUTS = 60 };
	char msg[256], buf[512], line[4096];
	long before = put_many_calls();
	int puts_before = -1, puts = 0;
	void *ctx = zmq_ctx_new(), *g, *loc;
	FILE *f;
	(void)state;

	hold_commit();
	g = raw_dealer(ctx, true);
	for (int i = 0; i < PUTS; i++) {
		snprintf(msg, sizeof(msg), "{\"id\": %d, \"method\": \"store.put_many\", \"params\":"
			 " {\"puts\": [{\"key\": \"certificates/acme/turn/a.json\", \"value\": \"A\"},"
			 " {\"key\": \"certificates/acme/turn/b.json\", \"value\": \"B\"}]}}", i);
		raw_send(g, msg);
	}
	/* Three in the workers, waiting on the flock; the rest queued. */
	TU_WAIT(put_many_calls() == before + 3);
	assert_int_equal(put_many_calls(), before + 3);
	loc = raw_dealer(ctx, false);
	raw_send(loc, "{\"id\": 1, \"method\": \"store.exists\", \"params\":"
		 " {\"key\": \"certificates/acme/turn/probe.json\"}}");
	/* The probe queued behind the 57 (a new connection's first call
	 * may take a while to arrive: the flock goes only once it has). */
	TU_WAIT(stat_of("calls_queued") == PUTS - 3 + 1);
	assert_int_equal(stat_of("calls_queued"), PUTS - 3 + 1);
	let_commit_go();
	next_reply(loc, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"exists\":false"));
	for (int i = 0; i < PUTS; i++) {
		next_reply(g, buf, sizeof(buf));
		assert_non_null(strstr(buf, "\"result\""));
	}
	/* The order the policy was asked in. */
	TU_WAIT(puts_before >= 0) {
		puts = 0;
		if (!(f = fopen(D.log, "r")))
			continue;
		while (fgets(line, sizeof(line), f)) {
			if (strstr(line, "certificates/acme/turn/a.json"))
				puts++;
			else if (strstr(line, "certificates/acme/turn/probe.json"))
				puts_before = puts;
		}
		fclose(f);
	}
	/* The probe is the second call handed out after the flock goes: on
	 * an idle machine 3-6 writes are logged before it (the three that
	 * waited, and what the other workers took while its worker ran).
	 * A worker thread the machine leaves unscheduled for a while lets
	 * more through, so the bound is half of them; first come, first
	 * served puts all 60 first. */
	if (puts_before > PUTS / 2)
		fail_msg("%d of the other caller's calls reached a worker first", puts_before);
	zmq_close(g);
	zmq_close(loc);
	zmq_ctx_term(ctx);
}

/*
 * A parked lock wait outlives no permission: a reload that takes the
 * waiter's lock rule away ends its wait "denied" at its next attempt
 * (the store asks the policy again when one was reloaded since).
 * Before, the answer at the wait's start held until its deadline, and
 * the waiter got the lock once it was freed.  Also: one caller parks at
 * most max_locks_per_caller waits (64 here), the next is answered busy.
 */
static void test_daemon_parked_wait_reload(void **state)
{
	enum { SHARE = TSEC_D_QUOTA };
	static const char no_locks[] = "{\"version\": 1, \"rules\": [{\"id\": \"good-some\", "
		"\"effect\": \"allow\", \"principal\": [\"svc:good\"], \"action\": "
		"[\"storage.*\", \"lock.release\"], \"resource\": [\"**\"]}]}";
	struct tsec_client *good = client("good", 10000);
	struct waiter w = { .who = "bad", .wait_ms = 60000 };
	struct tsec_error err;
	char params[160], msg[160], buf[512];
	void *ctx = zmq_ctx_new(), *g;
	(void)state;

	assert_int_equal(take_lock(good, "other-parked", 0, params, sizeof(params), &err), 0);
	assert_int_equal(pthread_create(&w.t, NULL, wait_for_lock, &w), 0);
	TU_WAIT(stat_of("lock_waits") == 1);
	assert_int_equal(stat_of("lock_waits"), 1);
	/* "good" parks its share of waits; one more is refused at once. */
	g = raw_dealer(ctx, true);
	for (int i = 0; i <= SHARE; i++) {
		snprintf(msg, sizeof(msg), "{\"id\": %d, \"method\": \"lock.acquire\", \"params\": "
			 "{\"name\": \"other-parked\", \"ttl_ms\": 60000, \"timeout_ms\": 60000}}", i);
		raw_send(g, msg);
	}
	next_reply(g, buf, sizeof(buf));
	if (!strstr(buf, "\"busy\"") || !strstr(buf, "waits for locks"))
		fail_msg("past the share: %s", buf);
	TU_WAIT(stat_of("lock_waits") == SHARE + 1);
	assert_int_equal(stat_of("lock_waits"), SHARE + 1);
	/* Neither may lock now: every parked wait is denied at its next
	 * attempt. */
	write_policy(no_locks, 4);
	sign_policy();
	reload_rpc(0);
	for (int i = 0; i < SHARE; i++) {
		next_reply(g, buf, sizeof(buf));
		if (!strstr(buf, "\"denied\""))
			fail_msg("parked wait %d after the reload: %s", i, buf);
	}
	assert_int_equal(pthread_join(w.t, NULL), 0);
	if (w.acquired != TSEC_EDENIED)
		fail_msg("the waiter got %d (%s), want denied", w.acquired, w.msg);
	assert_int_equal(stat_of("lock_waits"), 0);
	zmq_close(g);
	zmq_ctx_term(ctx);
	write_policy(policy_v1, 5);
	sign_policy();
	reload_rpc(0);
	assert_int_equal(tsec_client_call(good, "lock.release", params, NULL, &err), 0);
	tsec_client_close(&good);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daemon_callers),
		cmocka_unit_test(test_daemon_lock_quota),
		cmocka_unit_test(test_daemon_lock_quota_expiry),
		cmocka_unit_test_teardown(test_daemon_calls_survive_signals, stop_interrupting),
		cmocka_unit_test(test_daemon_lock_waits),
		cmocka_unit_test(test_daemon_workers_full),
		cmocka_unit_test(test_daemon_get_hit_on_loop),
		cmocka_unit_test(test_daemon_exists_keys),
		cmocka_unit_test(test_daemon_frames),
		cmocka_unit_test(test_daemon_batch),
		cmocka_unit_test(test_daemon_callers_in_turn),
		cmocka_unit_test(test_daemon_unknown_key),
		cmocka_unit_test(test_daemon_principal_claim),
		cmocka_unit_test(test_daemon_del_in_id),
		cmocka_unit_test(test_daemon_signal_elsewhere),
		cmocka_unit_test(test_daemon_parked_wait_reload),
	};
	return cmocka_run_group_tests_name("daemon", tests, setup, teardown);
}
