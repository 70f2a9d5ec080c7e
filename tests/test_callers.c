/*
 * A lock belongs to its caller, not to the broker it came through
 * (issue 48, items 1-3), on every backend that outlives a broker (file,
 * etcd, redis), through the real tsec-broker:
 *
 *   - a waiter that goes away holds nothing: interrupted (tsec lock
 *     acquire, ^C), killed (-9), or cancelled by its client library, its
 *     wait is dropped, and a lock granted to it after it went is let go
 *     at once, so the next live waiter or newcomer gets the lock;
 *   - a call's budget counts from when it reached the broker: one that
 *     waited for a worker past its caller's deadline is answered
 *     "timed out" and takes nothing; a caller that gave up on a paused
 *     broker is not handed the lock when the broker resumes;
 *   - a broker that stops or restarts leaves its live callers' locks
 *     held: nobody else takes them, their holders renew and release them.
 *
 * Each case names the lock it uses; the cases share one broker per
 * backend (started again where a case restarts it).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/client.h"

static struct {
	struct tu_server etcd, redis;
	char dir[64];
	char cfg[160], err[160], ipc[192], policy[160];
	const char *backend;
	pid_t pid;
} B;

/* ---- the broker ---- */

static struct tsec_client *client(int timeout_ms)
{
	struct tsec_client_opts o = { .endpoint = B.ipc, .timeout_ms = timeout_ms };
	struct tsec_client *c = NULL;
	struct tsec_error err;

	if (tsec_client_open(&c, &o, &err))
		fail_msg("client: %s", err.msg);
	return c;
}

static bool answers(void)
{
	struct tsec_client *c = client(300);
	struct tsec_error err;
	int rc = tsec_client_call(c, "health", NULL, NULL, &err);

	tsec_client_close(&c);
	return rc == 0;
}

static void broker_start(void)
{
	pid_t parent = getpid();

	B.pid = fork();
	assert_true(B.pid >= 0);
	if (B.pid == 0) {
		tu_child_dies_with(parent);
		FILE *e = freopen(B.err, "a", stderr);
		(void)e;
		execl(TSEC_BUILD_DIR "/tsec-broker", "tsec-broker", "--config", B.cfg, (char *)NULL);
		_exit(127);
	}
	TU_WAIT(answers() || waitpid(B.pid, NULL, WNOHANG) == B.pid);
	if (!answers()) {
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "tail -20 '%s' >&2", B.err);
		if (system(cmd))
			fprintf(stderr, "(no log)\n");
		fail_msg("tsec-broker on %s did not come up", B.backend);
	}
}

/* SIGTERM (as systemd stops it), and waits for it to end. */
static void broker_stop(void)
{
	int st;

	if (B.pid <= 0)
		return;
	kill(B.pid, SIGCONT);
	kill(B.pid, SIGTERM);
	assert_int_equal(tu_waitpid(B.pid, &st), B.pid);
	B.pid = 0;
}

/* One broker on `backend`, one worker (so a test can keep it busy), its
 * ipc caller svc:app allowed everything. */
static int up(void **state, const char *backend)
{
	char storage[512], cfg[2048];
	FILE *f;

	(void)state;
	B.backend = backend;
	snprintf(B.dir, sizeof(B.dir), "/tmp/tsec-callers-XXXXXX");
	if (!mkdtemp(B.dir))
		return -1;
	snprintf(B.policy, sizeof(B.policy), "%s/policy.json", B.dir);
	snprintf(B.cfg, sizeof(B.cfg), "%s/broker.json", B.dir);
	snprintf(B.err, sizeof(B.err), "%s/broker.err", B.dir);
	snprintf(B.ipc, sizeof(B.ipc), "ipc://%s/run/b.sock", B.dir);
	if (!(f = fopen(B.policy, "w")))
		return -1;
	fputs("{\"revision\": 1, \"version\": 1, \"rules\": [{\"id\": \"all\", \"effect\": "
	      "\"allow\", \"principal\": [\"svc:app\"], \"action\": [\"*\"], "
	      "\"resource\": [\"**\"]}]}\n", f);
	fclose(f);
	if (!strcmp(backend, "file"))
		snprintf(storage, sizeof(storage), "{\"backend\": \"file\", \"root\": \"%s/store\"}",
			 B.dir);
	else
		snprintf(storage, sizeof(storage), "{\"backend\": \"%s\", \"endpoints\": [\"%s\"], "
			 "\"prefix\": \"callers-%d\"}", backend,
			 backend[0] == 'e' ? B.etcd.endpoints : B.redis.endpoints, (int)getpid());
	snprintf(cfg, sizeof(cfg),
		 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
		 " \"allow_unsigned_policy\": true, \"state_dir\": \"%s\", \"storage\": %s,"
		 " \"workers\": 1, \"endpoints\": [\"%s\"],"
		 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:app\", \"admin\": true}]}",
		 TSEC_BUILD_DIR, B.policy, B.dir, storage, B.ipc, (int)getuid());
	if (!(f = fopen(B.cfg, "w")))
		return -1;
	fputs(cfg, f);
	fclose(f);
	broker_start();
	return 0;
}

static int up_file(void **state) { return up(state, "file"); }
static int up_etcd(void **state) { return up(state, "etcd"); }
static int up_redis(void **state) { return up(state, "redis"); }

static int down(void **state)
{
	char cmd[128];

	(void)state;
	if (B.pid > 0) {
		kill(B.pid, SIGKILL);
		waitpid(B.pid, NULL, 0);
		B.pid = 0;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", B.dir);
	return system(cmd) == 0 ? 0 : -1;
}

static long stat_of(const char *name)
{
	struct tsec_client *c = client(5000);
	struct tsec_error err;
	char *res = NULL;
	json_t *j;
	long v;

	assert_int_equal(tsec_client_call(c, "stats", NULL, &res, &err), 0);
	tsec_client_close(&c);
	j = json_loads(res, 0, NULL);
	free(res);
	v = (long)json_integer_value(json_object_get(j, name));
	json_decref(j);
	return v;
}

/* ---- locks ---- */

struct held {
	char name[64], token[33];
};

/* lock.acquire of name for a lease of ttl_ms, waiting up to wait_ms (0:
 * one try) on c: its code, the handle in *h on success. */
static int acquire(struct tsec_client *c, const char *name, long ttl_ms, long wait_ms,
		   struct held *h, struct tsec_error *err)
{
	char p[256], *res = NULL;
	json_t *j;
	int rc;

	snprintf(p, sizeof(p), "{\"name\": \"%s\", \"ttl_ms\": %ld, \"timeout_ms\": %ld}", name,
		 ttl_ms, wait_ms);
	if ((rc = tsec_client_call(c, "lock.acquire", p, &res, err)))
		return rc;
	j = json_loads(res, 0, NULL);
	free(res);
	assert_non_null(j);
	if (h) {
		snprintf(h->name, sizeof(h->name), "%s", name);
		snprintf(h->token, sizeof(h->token), "%s",
			 json_string_value(json_object_get(j, "token")));
	}
	json_decref(j);
	return 0;
}

static int lock_op(struct tsec_client *c, const char *method, const struct held *h,
		   struct tsec_error *err)
{
	char p[256];

	snprintf(p, sizeof(p), "{\"name\": \"%s\", \"token\": \"%s\", \"ttl_ms\": 60000}",
		 h->name, h->token);
	return tsec_client_call(c, method, p, NULL, err);
}

/* Whether a newcomer can take name now (and it lets it go again). */
static bool free_now(const char *name)
{
	struct tsec_client *c = client(5000);
	struct tsec_error err;
	struct held h;
	bool got = acquire(c, name, 60000, 0, &h, &err) == 0;

	if (got)
		assert_int_equal(lock_op(c, "lock.release", &h, &err), 0);
	tsec_client_close(&c);
	return got;
}

/* A waiter in a thread of this process: lock.acquire with a wait. */
struct waiter {
	pthread_t t;
	struct tsec_client *c;
	const char *name;
	long wait_ms;
	int rc;
	struct held h;
	char msg[256];
};

static void *wait_for(void *arg)
{
	struct waiter *w = arg;
	struct tsec_error err;

	w->rc = acquire(w->c, w->name, 600000, w->wait_ms, &w->h, &err);
	snprintf(w->msg, sizeof(w->msg), "%s", w->rc ? err.msg : "");
	return NULL;
}

/* ---- 1. a caller that has gone never holds a lock ---- */

/*
 * `tsec lock acquire --wait-ms 8000` interrupted (^C) while it waits: the
 * broker drops its wait, and when the holder lets go the lock is free
 * for a newcomer (it was held by nobody for the whole lease: the broker
 * took it for the waiter that had gone).
 */
static void test_interrupted_cli_waiter(void **state)
{
	struct tsec_client *h = client(5000);
	struct tsec_error err;
	struct held lk;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(acquire(h, "cli-int", 600000, 0, &lk, &err), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		setenv("TSEC_ENDPOINT", B.ipc, 1);
		execl(TSEC_BUILD_DIR "/tsec", "tsec", "lock", "acquire", "cli-int", "--ttl-ms",
		      "600000", "--wait-ms", "8000", (char *)NULL);
		_exit(127);
	}
	TU_WAIT(stat_of("lock_waits") == 1);
	assert_int_equal(stat_of("lock_waits"), 1);
	kill(pid, SIGINT);
	assert_int_equal(tu_waitpid(pid, &st), pid);
	/* Interrupted: 130, as a shell reports ^C. */
	assert_true((WIFEXITED(st) && WEXITSTATUS(st) == 130) ||
		    (WIFSIGNALED(st) && WTERMSIG(st) == SIGINT));
	assert_int_equal(lock_op(h, "lock.release", &lk, &err), 0);
	TU_WAIT(free_now("cli-int"));
	if (!free_now("cli-int"))
		fail_msg("the lock was taken for a waiter that had been interrupted");
	assert_int_equal(stat_of("lock_waits"), 0);
	tsec_client_close(&h);
}

/*
 * A queued waiter killed with -9, and a live one behind it: when the
 * holder lets go the live one gets the lock (the broker took it for the
 * dead one, and the live one timed out).
 */
static void test_killed_waiter(void **state)
{
	struct tsec_client *h = client(5000);
	struct waiter live = { .name = "kill9", .wait_ms = 25000 };
	struct tsec_error err;
	struct held lk;
	pid_t pid;

	(void)state;
	assert_int_equal(acquire(h, "kill9", 600000, 0, &lk, &err), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct tsec_client *c = client(30000);

		acquire(c, "kill9", 600000, 25000, NULL, &err);
		_exit(0);
	}
	TU_WAIT(stat_of("lock_waits") == 1);
	live.c = client(30000);
	assert_int_equal(pthread_create(&live.t, NULL, wait_for, &live), 0);
	TU_WAIT(stat_of("lock_waits") == 2);
	assert_int_equal(stat_of("lock_waits"), 2);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(lock_op(h, "lock.release", &lk, &err), 0);
	assert_int_equal(pthread_join(live.t, NULL), 0);
	if (live.rc)
		fail_msg("the live waiter got %d (%s): the lock went to the killed one", live.rc,
			 live.msg);
	assert_int_equal(lock_op(live.c, "lock.release", &live.h, &err), 0);
	tsec_client_close(&live.c);
	tsec_client_close(&h);
}

/* A DEALER of its own, for calls the client library would not make: the
 * next reply's text (delimiter skipped). */
static void *raw_dealer(void *ctx)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	int zero = 0, tmo = 60000;

	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	assert_int_equal(zmq_connect(s, B.ipc), 0);
	return s;
}

static void raw_send(void *s, const char *msg)
{
	assert_true(zmq_send(s, "", 0, ZMQ_SNDMORE) == 0);
	assert_true(zmq_send(s, msg, strlen(msg), 0) == (int)strlen(msg));
}

/* The replies to calls a and b (in whichever order they come), as JSON
 * objects (new) into ra and rb; replies to other ids are dropped.  b 0:
 * only a's. */
static void raw_replies(void *s, long a, json_t **ra, long b, json_t **rb)
{
	char buf[2048];

	*ra = NULL;
	if (rb)
		*rb = NULL;
	while (!*ra || (b && !*rb)) {
		json_t *j;
		long id;
		int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);

		if (n == 0)
			continue;        /* the delimiter */
		if (n < 0)
			fail_msg("no reply to call %ld", *ra ? b : a);
		buf[(size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1] = '\0';
		j = json_loads(buf, 0, NULL);
		assert_non_null(j);
		id = (long)json_integer_value(json_object_get(j, "id"));
		if (id == a && !*ra)
			*ra = j;
		else if (b && id == b && !*rb)
			*rb = j;
		else
			json_decref(j);
	}
}

static json_t *raw_reply(void *s, long id)
{
	json_t *r;

	raw_replies(s, id, &r, 0, NULL);
	return r;
}

static const char *code_of(const json_t *reply)
{
	return json_string_value(json_object_get(json_object_get(reply, "error"), "code"));
}

/*
 * A client library cancels a wait (its context cancelled, ^C): the wait
 * is answered "cancelled" at once and never takes the lock.
 */
static void test_cancel_waiting(void **state)
{
	struct tsec_client *h = client(5000);
	void *ctx = zmq_ctx_new(), *x = raw_dealer(ctx);
	struct tsec_error err;
	struct held lk;
	json_t *r, *c;

	(void)state;
	assert_int_equal(acquire(h, "cancel-wait", 600000, 0, &lk, &err), 0);
	raw_send(x, "{\"id\": 1, \"method\": \"lock.acquire\", \"params\": {\"name\": "
		 "\"cancel-wait\", \"ttl_ms\": 600000, \"timeout_ms\": 20000}}");
	TU_WAIT(stat_of("lock_waits") == 1);
	raw_send(x, "{\"id\": 2, \"method\": \"cancel\", \"params\": {\"id\": 1}}");
	raw_replies(x, 1, &r, 2, &c);
	if (!code_of(r) || strcmp(code_of(r), "cancelled"))
		fail_msg("the cancelled wait was answered %s", json_dumps(r, 0));
	json_decref(r);
	assert_null(json_object_get(c, "error"));
	json_decref(c);
	assert_int_equal(stat_of("lock_waits"), 0);
	assert_int_equal(lock_op(h, "lock.release", &lk, &err), 0);
	TU_WAIT(free_now("cancel-wait"));
	assert_true(free_now("cancel-wait"));
	zmq_close(x);
	zmq_ctx_term(ctx);
	tsec_client_close(&h);
}

/*
 * The cancel crosses the grant: the broker answered the wait with the
 * lock before the cancel came.  The lock is let go when the cancel
 * comes, not held by nobody for its lease.
 */
static void test_cancel_after_grant(void **state)
{
	struct tsec_client *h = client(5000);
	void *ctx = zmq_ctx_new(), *x = raw_dealer(ctx);
	struct tsec_error err;
	struct held lk;
	json_t *r;

	(void)state;
	assert_int_equal(acquire(h, "cancel-late", 600000, 0, &lk, &err), 0);
	raw_send(x, "{\"id\": 7, \"method\": \"lock.acquire\", \"params\": {\"name\": "
		 "\"cancel-late\", \"ttl_ms\": 600000, \"timeout_ms\": 20000}}");
	TU_WAIT(stat_of("lock_waits") == 1);
	assert_int_equal(lock_op(h, "lock.release", &lk, &err), 0);
	r = raw_reply(x, 7);
	assert_non_null(json_object_get(json_object_get(r, "result"), "token"));
	json_decref(r);
	assert_false(free_now("cancel-late"));
	raw_send(x, "{\"id\": 8, \"method\": \"cancel\", \"params\": {\"id\": 7}}");
	r = raw_reply(x, 8);
	assert_null(json_object_get(r, "error"));
	json_decref(r);
	TU_WAIT(free_now("cancel-late"));
	if (!free_now("cancel-late"))
		fail_msg("a grant its caller cancelled stayed held");
	zmq_close(x);
	zmq_ctx_term(ctx);
	tsec_client_close(&h);
}

/* The client library's interrupt, from another thread: the call returns
 * TSEC_ECANCELED and its wait is gone from the broker. */
static void test_client_interrupt(void **state)
{
	struct tsec_client *h = client(5000);
	struct waiter w = { .name = "interrupt", .wait_ms = 20000 };
	struct tsec_error err;
	struct held lk;

	(void)state;
	assert_int_equal(acquire(h, "interrupt", 600000, 0, &lk, &err), 0);
	w.c = client(30000);
	assert_int_equal(pthread_create(&w.t, NULL, wait_for, &w), 0);
	TU_WAIT(stat_of("lock_waits") == 1);
	tsec_client_interrupt(w.c);
	assert_int_equal(pthread_join(w.t, NULL), 0);
	assert_int_equal(w.rc, TSEC_ECANCELED);
	/* (A cancel that found the wait mid-attempt is answered at once; the
	 * wait ends when the attempt comes back.) */
	TU_WAIT(stat_of("lock_waits") == 0);
	assert_int_equal(stat_of("lock_waits"), 0);
	assert_int_equal(lock_op(h, "lock.release", &lk, &err), 0);
	TU_WAIT(free_now("interrupt"));
	assert_true(free_now("interrupt"));
	/* The client works on after an interrupt. */
	assert_int_equal(tsec_client_call(w.c, "health", NULL, NULL, &err), 0);
	tsec_client_close(&w.c);
	tsec_client_close(&h);
}

/* ---- 2. a budget counts from when the call arrived ---- */

/*
 * The broker paused (SIGSTOP) while a caller asks for a free lock and
 * gives up at its deadline; the broker resumes: the lock must not be
 * granted to the caller that left.
 */
static void test_paused_broker_caller_gave_up(void **state)
{
	struct tsec_client *x = client(1500);
	struct tsec_error err;
	int rc;

	(void)state;
	assert_int_equal(tsec_client_call(x, "health", NULL, NULL, &err), 0);
	kill(B.pid, SIGSTOP);
	rc = acquire(x, "paused", 600000, 0, NULL, &err);
	kill(B.pid, SIGCONT);
	assert_int_not_equal(rc, 0);
	TU_WAIT(free_now("paused"));
	if (!free_now("paused"))
		fail_msg("the lock went to a caller that had given up while the broker was paused");
	tsec_client_close(&x);
}

/* Milliseconds on this process's monotonic clock. */
static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Keeps the broker's one worker busy: takes the file store's commit
 * flock, then asks x for a write (call id 1), which waits on it in the
 * worker.  Returns the flock's descriptor for let_worker_go.
 */
static int keep_worker_busy(void *x)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/store/.tsec-journal/.tsec-commit", B.dir);
	assert_true((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	raw_send(x, "{\"id\": 1, \"method\": \"store.put_many\", \"params\": {\"puts\": ["
		 "{\"key\": \"busy/a\", \"value\": \"A\"}, {\"key\": \"busy/b\", \"value\": "
		 "\"B\"}]}}");
	return fd;
}

/* Lets the worker go and takes the write's answer (made). */
static void let_worker_go(void *x, int fd)
{
	json_t *r;

	close(fd);
	r = raw_reply(x, 1);
	assert_null(json_object_get(r, "error"));
	json_decref(r);
}

/*
 * The one worker kept busy (a write waits on the file store's commit
 * flock, which this test holds) while an acquire with a budget of 1 s
 * (deadline_ms) waits for it; the worker comes free after that budget:
 * the acquire is answered "timed out" and takes nothing (counted from
 * when the worker started it, it took the lock for a caller that had
 * stopped listening).  A raw caller, which sends no cancel.
 */
static void test_budget_from_arrival(void **state)
{
	void *ctx = zmq_ctx_new(), *x = raw_dealer(ctx);
	long long queued;
	json_t *r;
	int fd;

	(void)state;
	fd = keep_worker_busy(x);
	raw_send(x, "{\"id\": 2, \"method\": \"lock.acquire\", \"params\": {\"name\": "
		 "\"budget\", \"ttl_ms\": 600000, \"deadline_ms\": 1000}}");
	TU_WAIT(stat_of("calls_queued") == 1);
	assert_int_equal(stat_of("calls_queued"), 1);
	/* The caller's deadline passes while its call waits for the worker:
	 * counted from here, when the broker surely had it. */
	queued = mono_ms();
	TU_WAIT(mono_ms() > queued + 1200);
	let_worker_go(x, fd);
	r = raw_reply(x, 2);
	if (!code_of(r) || strcmp(code_of(r), "timed_out"))
		fail_msg("an acquire whose budget ran out while queued: %s", json_dumps(r, 0));
	json_decref(r);
	assert_true(free_now("budget"));
	zmq_close(x);
	zmq_ctx_term(ctx);
}

/*
 * A wait on a held lock whose time passed while the call waited for the
 * worker: answered "timed out" (the lock still held when its deadline
 * passed), as it is on a quiet machine, not "busy" (one try's answer):
 * the answer must not depend on how fast the machine was.
 */
static void test_wait_used_up_while_queued(void **state)
{
	struct tsec_client *h = client(5000);
	void *ctx = zmq_ctx_new(), *x = raw_dealer(ctx);
	struct tsec_error err;
	struct held lk;
	long long queued;
	json_t *r;
	int fd;

	(void)state;
	assert_int_equal(acquire(h, "used-up", 600000, 0, &lk, &err), 0);
	fd = keep_worker_busy(x);
	raw_send(x, "{\"id\": 2, \"method\": \"lock.acquire\", \"params\": {\"name\": "
		 "\"used-up\", \"ttl_ms\": 600000, \"timeout_ms\": 300, \"deadline_ms\": 60000}}");
	TU_WAIT(stat_of("calls_queued") == 1);
	assert_int_equal(stat_of("calls_queued"), 1);
	queued = mono_ms();
	TU_WAIT(mono_ms() > queued + 500);
	let_worker_go(x, fd);
	r = raw_reply(x, 2);
	if (!code_of(r) || strcmp(code_of(r), "timed_out"))
		fail_msg("a wait whose time passed in the queue: %s", json_dumps(r, 0));
	json_decref(r);
	assert_int_equal(lock_op(h, "lock.release", &lk, &err), 0);
	zmq_close(x);
	zmq_ctx_term(ctx);
	tsec_client_close(&h);
}

/* ---- 3. a broker restart hands no lock over ---- */

static void test_restart_keeps_locks(void **state)
{
	struct tsec_client *a = client(5000), *b;
	struct tsec_error err;
	struct held lk;

	(void)state;
	assert_int_equal(acquire(a, "kept", 60000, 0, &lk, &err), 0);
	broker_stop();
	broker_start();
	b = client(5000);
	if (acquire(b, "kept", 60000, 0, NULL, &err) == 0)
		fail_msg("after a restart another caller took a lock its holder still had");
	assert_int_equal(lock_op(a, "lock.renew", &lk, &err), 0);
	assert_int_equal(lock_op(a, "lock.release", &lk, &err), 0);
	assert_true(free_now("kept"));
	tsec_client_close(&a);
	tsec_client_close(&b);
}

#define CASES(backend) \
	cmocka_unit_test(test_interrupted_cli_waiter), \
	cmocka_unit_test(test_killed_waiter), \
	cmocka_unit_test(test_cancel_waiting), \
	cmocka_unit_test(test_cancel_after_grant), \
	cmocka_unit_test(test_client_interrupt), \
	cmocka_unit_test(test_paused_broker_caller_gave_up), \
	cmocka_unit_test(test_restart_keeps_locks)

int main(void)
{
	const struct CMUnitTest file[] = {
		CASES(file),
		cmocka_unit_test(test_budget_from_arrival),
		cmocka_unit_test(test_wait_used_up_while_queued),
	};
	const struct CMUnitTest shared[] = { CASES(shared) };
	int failed = 0;

	signal(SIGPIPE, SIG_IGN);
	if (tu_etcd_start(&B.etcd, 1) || tu_redis_start(&B.redis)) {
		fprintf(stderr, "callers: cannot start etcd and redis-server "
			"(scripts/deps.sh servers installs them)\n");
		tu_server_stop(&B.etcd);
		tu_server_stop(&B.redis);
		return 1;
	}
	failed |= cmocka_run_group_tests_name("callers: file", file, up_file, down);
	failed |= cmocka_run_group_tests_name("callers: etcd", shared, up_etcd, down);
	failed |= cmocka_run_group_tests_name("callers: redis", shared, up_redis, down);
	tu_server_stop(&B.etcd);
	tu_server_stop(&B.redis);
	return failed ? 1 : 0;
}
