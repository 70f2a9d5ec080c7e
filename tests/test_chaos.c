/*
 * Chaos: workers take locks, write under them (fenced), read, renew and
 * release against real etcd and redis, each through its own fault proxy
 * (tests/faults.h), while a fault thread hangs, delays (a hang released
 * later forwards what it held), drops answers and cuts connections at
 * random, and the main thread pauses the server (SIGSTOP) or kills it
 * and starts it again on its data.  After each release a worker writes
 * once more with the handle it let go, which must be refused.  Every
 * operation is recorded (invoked and answered in microseconds, outcome,
 * the lock handle, and each value, unique: "FENCE:WORKER:SEQ") and the
 * history is checked afterwards by tests/chaos_check.c: grants never
 * overlap and their fences rise; no write is accepted from a holder that
 * no longer held the lock; every read returns a value some acknowledged
 * or pending write could have left (within the LocalCache's staleness
 * bound where one is on); and each key's whole history linearizes as a
 * register (issue 48, item 8: values were compared by fence only, and
 * faults planted in the storage code went unseen).
 *
 * The checker is tested twice: here, on histories with one planted fault
 * each (its logic); and by `make chaos-mutants`
 * (scripts/chaos-mutants.sh), which plants each fault class in the
 * storage code of a scratch copy (a dropped acknowledged write, a stale
 * cached read, an unfenced write, a second holder, a fence going back)
 * and fails unless this suite, run on it, names the fault.
 * etcd is a 3-member cluster; a worker reaches one member through its
 * proxy and the other two directly, and the server faults pause or
 * restart a random member.  The broker cases put two tsec-brokers between
 * the workers and the backend (each through its own fault proxy; workers
 * fail over between them) and also pause a broker or kill it (-9) and
 * start it again.
 *
 * CHAOS_SECONDS (default 6) per backend; `make chaos` runs it longer;
 * CHAOS_ONLY (a cmocka pattern, "*redis*") picks the cases.
 * Counts of operations, faults and violations are printed; any violation
 * fails.  No assertion depends on speed: the checks compare the order of
 * events measured on one monotonic clock.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "common/clock.h"
#include "tests/chaos_check.h"
#include "tests/faults.h"
#include "tests/servers.h"
#include "tests/testutil.h"
#include "tests/wait.h"
#include "tinysecurity/client.h"

#define WORKERS 4
#define LOCKS 2
#define TTL_MS 1000
#define LIVE_MS 600                  /* the cache's bound */
#define EVENTS_MAX 1000000          /* full: the run ends early */

/* Monotonic microseconds: the events' times. */
static int64_t now_us(void)
{
	return (int64_t)(tsec__mono_ns() / 1000);
}

static struct {
	struct tu_server etcd, redis;
	pthread_mutex_t mu;
	struct chaos_event *ev;
	size_t nev;
	atomic_int stop;
	struct tu_server *srv;       /* the server of the run */
	atomic_long faults, violations, pauses, restarts, hangs, drops, cuts;
	const char *first;           /* the first violation's kind */
	long steps;                  /* the linearizability search's work */
	bool gave_up;                /* it passed its bound: not checked whole */
	bool quiet;                  /* the checker's own test: planted ones */
	atomic_int server_lost;
	int seconds;
	bool cached;
	/* With brokers: workers call two tsec-brokers over the backend. */
	bool brokers;
	char dir[64], bcfg[2][128], bipc[2][160], berr[2][128];
	pid_t bpid[2];
	atomic_long broker_pauses, broker_restarts;
	struct tu_proxy *px[WORKERS];    /* the proxies the fault thread works on */
	int npx;
} C;

static struct tsec_principal app;

static void record(const struct chaos_event *e)
{
	pthread_mutex_lock(&C.mu);
	if (C.nev < EVENTS_MAX)
		C.ev[C.nev++] = *e;
	else
		atomic_store(&C.stop, 1);
	pthread_mutex_unlock(&C.mu);
}

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

struct worker {
	int id;
	struct tu_store t;
	struct tu_proxy *px;
	struct tsec_client *c;       /* with brokers: the calls go here */
	unsigned seed;
};

/* ---- One operation, on the store or through a broker ---- */

/* A broker call; its result parsed into *res (NULL when none). */
static int bcall(struct worker *w, const char *method, json_t *params, json_t **res)
{
	struct tsec_error err;
	char *text = json_dumps(params, JSON_COMPACT), *out = NULL;
	int rc = tsec_client_call(w->c, method, text, &out, &err);

	free(text);
	json_decref(params);
	if (res)
		*res = out ? json_loads(out, 0, NULL) : NULL;
	free(out);
	return rc;
}

static json_t *lock_json(const struct tsec_lock *lk, bool with_fence)
{
	char hex[33];

	sodium_bin2hex(hex, sizeof(hex), lk->token, 16);
	return with_fence ? json_pack("{s:s,s:s,s:I}", "name", lk->name, "token", hex, "fence",
				      (json_int_t)lk->fence)
			  : json_pack("{s:s,s:s,s:i}", "name", lk->name, "token", hex, "ttl_ms",
				      TTL_MS);
}

static int w_acquire(struct worker *w, const char *name, struct tsec_lock *lk)
{
	struct tsec_error err;
	json_t *r = NULL;
	int rc;

	if (!w->c)
		return tsec_lock_acquire(w->t.store, &app, name, TTL_MS, 1500, lk, &err);
	rc = bcall(w, "lock.acquire", json_pack("{s:s,s:i,s:i}", "name", name, "ttl_ms", TTL_MS,
						"timeout_ms", 1500), &r);
	if (!rc) {
		const char *tok = json_string_value(json_object_get(r, "token"));

		memset(lk, 0, sizeof(*lk));
		snprintf(lk->name, sizeof(lk->name), "%s", name);
		lk->fence = (uint64_t)json_integer_value(json_object_get(r, "fence"));
		if (!tok || sodium_hex2bin(lk->token, 16, tok, strlen(tok), NULL, NULL, NULL))
			rc = TSEC_EPROTO;
	}
	json_decref(r);
	return rc;
}

static int w_put(struct worker *w, struct tsec_lock *lk, const struct tsec_put *p)
{
	struct tsec_error err;

	if (!w->c)
		return tsec_store_put_fenced(w->t.store, &app, lk, p, 1, &err);
	return bcall(w, "store.put", json_pack("{s:s,s:s%,s:o}", "key", p->key, "value", p->value,
					       p->len, "lock", lock_json(lk, true)), NULL);
}

static int w_get(struct worker *w, const char *k, char **v, size_t *n)
{
	struct tsec_error err;
	json_t *r = NULL;
	int rc;

	if (!w->c)
		return tsec_store_get(w->t.store, &app, k, v, n, &err);
	rc = bcall(w, "store.get", json_pack("{s:s}", "key", k), &r);
	if (!rc) {
		const char *s = json_string_value(json_object_get(r, "value"));

		*n = s ? strlen(s) : 0;
		*v = s ? strdup(s) : NULL;
		if (!s)
			rc = TSEC_EPROTO;
	}
	json_decref(r);
	return rc;
}

static int w_renew(struct worker *w, struct tsec_lock *lk)
{
	struct tsec_error err;

	if (!w->c)
		return tsec_lock_renew(w->t.store, &app, lk, TTL_MS, &err);
	return bcall(w, "lock.renew", lock_json(lk, false), NULL);
}

static int w_release(struct worker *w, struct tsec_lock *lk)
{
	struct tsec_error err;

	if (!w->c)
		return tsec_lock_release(w->t.store, &app, lk, &err);
	return bcall(w, "lock.release", lock_json(lk, false), NULL);
}

static void key_of(int lock, char *k, size_t n)
{
	snprintf(k, n, "chaos/l%d", lock);
}

/* A value "FENCE:WORKER:SEQ" read back into e (vseq 0: not one). */
static void value_in(const char *v, size_t n, struct chaos_event *e)
{
	unsigned long long f = 0, s = 0;
	int w = 0;
	char buf[64];

	if (n >= sizeof(buf))
		return;
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (sscanf(buf, "%llu:%d:%llu", &f, &w, &s) == 3 && s > 0 && s <= UINT32_MAX) {
		e->fence = f;
		e->vworker = w;
		e->vseq = (uint32_t)s;
	} else {
		e->vseq = UINT32_MAX;        /* a value no write of the run wrote */
	}
}

static void do_get(struct worker *w, int lock)
{
	struct chaos_event e = { .kind = CH_GET, .worker = w->id, .lock = lock, .inv = now_us() };
	char k[32], *v = NULL;
	size_t n;

	key_of(lock, k, sizeof(k));
	e.rc = w_get(w, k, &v, &n);
	e.ok = now_us();
	if (!e.rc)
		value_in(v, n, &e);
	free(v);
	record(&e);
}

/* A fenced put of a new value under lk, recorded. */
static int do_put(struct worker *w, int lock, struct tsec_lock *lk, uint32_t *seq)
{
	struct chaos_event p = { .kind = CH_PUT, .worker = w->id, .lock = lock, .fence = lk->fence,
				 .vworker = w->id, .vseq = ++*seq };
	char k[32], val[64];
	struct tsec_put put = { k, val, 0 };

	key_of(lock, k, sizeof(k));
	memcpy(p.token, lk->token, 16);
	put.len = (size_t)snprintf(val, sizeof(val), "%llu:%d:%u", (unsigned long long)lk->fence,
				   w->id, p.vseq);
	p.inv = now_us();
	p.rc = w_put(w, lk, &put);
	p.ok = now_us();
	record(&p);
	return p.rc;
}

/* A renew or release of lk, recorded. */
static int do_lock_op(struct worker *w, int lock, struct tsec_lock *lk, enum chaos_kind kind)
{
	struct chaos_event e = { .kind = kind, .worker = w->id, .lock = lock, .fence = lk->fence };

	memcpy(e.token, lk->token, 16);
	e.inv = now_us();
	e.rc = kind == CH_RENEW ? w_renew(w, lk) : w_release(w, lk);
	e.ok = now_us();
	record(&e);
	return e.rc;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	uint32_t seq = 0;

	while (!atomic_load(&C.stop)) {
		int lock = (int)(rand_r(&w->seed) % LOCKS);
		char name[16];
		struct chaos_event a = { .kind = CH_ACQ, .worker = w->id, .lock = lock,
					 .inv = now_us() };
		struct tsec_lock lk;

		snprintf(name, sizeof(name), "chaos%d", lock);
		a.rc = w_acquire(w, name, &lk);
		a.ok = now_us();
		if (!a.rc) {
			a.fence = lk.fence;
			memcpy(a.token, lk.token, 16);
		}
		record(&a);
		if (a.rc) {
			do_get(w, lock);
			continue;
		}
		for (int i = 0; i < 3 && !atomic_load(&C.stop); i++) {
			do_put(w, lock, &lk, &seq);
			do_get(w, lock);
			/* And the other key, as a reader who holds no lock does
			 * (through its own LocalCache, where one is on). */
			do_get(w, (lock + 1) % LOCKS);
			if (do_lock_op(w, lock, &lk, CH_RENEW))
				break;
		}
		/* Let go, then a write with the handle let go: a holder that no
		 * longer holds the lock, which must be refused. */
		do_lock_op(w, lock, &lk, CH_REL);
		do_put(w, lock, &lk, &seq);
	}
	return NULL;
}

/*
 * Faults at random: on one worker's path, hang (then release: a delay),
 * drop answers, cut connections.  The server faults are the main
 * thread's (server_faults).
 */
static void *faults(void *arg)
{
	struct tu_proxy **px = arg;
	unsigned seed = 12345;

	while (!atomic_load(&C.stop)) {
		struct { struct tu_proxy *px; } pv = { px[rand_r(&seed) % (unsigned)C.npx] }, *v = &pv;
		int what = (int)(rand_r(&seed) % 6);

		atomic_fetch_add(&C.faults, 1);
		if (what >= 4) {
			atomic_fetch_add(&C.cuts, 1);
			tu_proxy_cut(v->px);
		} else {
			atomic_fetch_add(what < 2 ? &C.hangs : &C.drops, 1);
			tu_proxy_set(v->px, what < 2 ? TU_HANG : TU_DROP);
			nap(50 + (long)(rand_r(&seed) % 1500));
			tu_proxy_set(v->px, TU_PASS);
			if (what >= 2)
				tu_proxy_cut(v->px);     /* what was dropped: the client hears */
		}
		nap(20 + (long)(rand_r(&seed) % 300));
	}
	return NULL;
}

/* ---- Brokers between the workers and the backend ---- */

static struct tsec_client *broker_client(int which, int timeout_ms)
{
	struct tsec_client_endpoint eps[2] = { { C.bipc[0], NULL }, { C.bipc[1], NULL } };
	struct tsec_client_opts o = { .timeout_ms = timeout_ms };
	struct tsec_client *c = NULL;
	struct tsec_error err;

	if (which < 0) {                 /* both, failing over */
		o.endpoints = eps;
		o.nendpoints = 2;
		o.attempt_ms = 500;
	} else {
		o.endpoint = C.bipc[which];
	}
	assert_int_equal(tsec_client_open(&c, &o, &err), 0);
	return c;
}

static int broker_answers(int which)
{
	struct tsec_client *c = broker_client(which, 200);
	struct tsec_error err;
	int rc = tsec_client_call(c, "health", NULL, NULL, &err);

	tsec_client_close(&c);
	return rc == 0;
}

static pid_t broker_spawn(int which)
{
	pid_t parent = getpid(), pid = fork();

	if (pid == 0) {
		tu_child_dies_with(parent);   /* from the main thread only */
		FILE *e = freopen(C.berr[which], "a", stderr);
		(void)e;
		execl(TSEC_BUILD_DIR "/tsec-broker", "tsec-broker", "--config", C.bcfg[which],
		      (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Whether broker `which` answers; started again, as a supervisor would,
 * when it exited (a broker that cannot reach its backend at start, the
 * server restarting or its proxy hung, stops with an error). */
static bool broker_up(int which)
{
	if (C.bpid[which] > 0 && waitpid(C.bpid[which], NULL, WNOHANG) == C.bpid[which])
		C.bpid[which] = broker_spawn(which);
	return C.bpid[which] > 0 && broker_answers(which);
}

/* Starts broker `which` (from the main thread) and waits until it
 * answers; false (its log's end said) when it never did. */
static bool broker_start(int which)
{
	char cmd[256];

	C.bpid[which] = broker_spawn(which);
	TU_WAIT(broker_up(which));
	if (broker_up(which))
		return true;
	snprintf(cmd, sizeof(cmd), "tail -5 '%s' >&2", C.berr[which]);
	if (system(cmd))
		fprintf(stderr, "(no log)\n");
	return false;
}

static void broker_stop(int which, int sig)
{
	if (C.bpid[which] > 0) {
		kill(C.bpid[which], SIGCONT);
		kill(C.bpid[which], sig);
		waitpid(C.bpid[which], NULL, 0);
		C.bpid[which] = 0;
	}
}

/*
 * Two brokers over the backend: each reaches it through its own fault
 * proxy (etcd: to one member, the others direct); every caller is
 * svc:app, allowed everything.
 */
static void brokers_up(const char *backend, const char *prefix)
{
	char path[160], cfg[2048], eps[512];
	FILE *f;

	snprintf(C.dir, sizeof(C.dir), "/tmp/tsec-chaos-XXXXXX");
	assert_non_null(mkdtemp(C.dir));
	snprintf(path, sizeof(path), "%s/policy.json", C.dir);
	assert_non_null(f = fopen(path, "w"));
	fputs("{\"revision\": 1, \"version\": 1, \"rules\": [{\"id\": \"all\", \"effect\": "
	      "\"allow\", \"principal\": [\"svc:app\"], \"action\": [\"*\"], "
	      "\"resource\": [\"**\"]}]}\n", f);
	fclose(f);
	C.npx = 2;
	for (int i = 0; i < 2; i++) {
		int port, mem = C.srv == &C.etcd ? i % C.srv->n : 0;

		assert_non_null(C.px[i] = tu_proxy_start(tu_port_of(C.srv == &C.etcd ?
						C.srv->url[mem] : C.srv->endpoints), &port));
		snprintf(eps, sizeof(eps), "\"%s127.0.0.1:%d\"", C.srv == &C.etcd ? "http://" : "",
			 port);
		for (int k = 0; C.srv == &C.etcd && k < C.srv->n; k++)
			if (k != mem)
				snprintf(eps + strlen(eps), sizeof(eps) - strlen(eps), ", \"%s\"",
					 C.srv->url[k]);
		snprintf(C.bipc[i], sizeof(C.bipc[i]), "ipc://%s/b%d.sock", C.dir, i);
		snprintf(C.bcfg[i], sizeof(C.bcfg[i]), "%s/broker%d.json", C.dir, i);
		snprintf(C.berr[i], sizeof(C.berr[i]), "%s/broker%d.err", C.dir, i);
		snprintf(cfg, sizeof(cfg),
			 "{\"module\": \"%s/libtinysecurity_module.so\", \"policy\": \"%s\","
			 " \"allow_unsigned_policy\": true, \"state_dir\": \"%s\","
			 " \"storage\": {\"backend\": \"%s\", \"endpoints\": [%s],"
			 "  \"prefix\": \"%s\", \"timeout_ms\": 1500},"
			 " \"endpoints\": [\"%s\"],"
			 " \"ipc_uids\": [{\"uid\": %d, \"principal\": \"svc:app\"}]}",
			 TSEC_BUILD_DIR, path, C.dir, backend, eps, prefix, C.bipc[i],
			 (int)getuid());
		assert_non_null(f = fopen(C.bcfg[i], "w"));
		fputs(cfg, f);
		fclose(f);
		if (!broker_start(i))
			fail_msg("tsec-broker %d did not come up", i);
	}
}

static void brokers_down(void)
{
	char cmd[128];

	for (int i = 0; i < 2; i++) {
		broker_stop(i, SIGTERM);
		if (C.px[i])
			tu_proxy_stop(C.px[i]);
		C.px[i] = NULL;
	}
	if (!C.dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", C.dir);
	if (system(cmd))
		fprintf(stderr, "chaos: could not remove %s\n", C.dir);
	C.dir[0] = '\0';
}

/* After a broker case, passed or failed: no broker is left running. */
static int brokers_gone(void **state)
{
	(void)state;
	brokers_down();
	return 0;
}

/*
 * For the run's length, on the server every worker shares: pause it
 * (SIGSTOP, then SIGCONT) or kill it and start it again on its data
 * (etcd's WAL; redis's append-only file, fsync always).  From the main
 * thread: a server started from a thread dies when that thread ends
 * (tests/servers.c: PR_SET_PDEATHSIG).
 */
static void server_faults(void)
{
	unsigned seed = 4242;
	int64_t end = tsec__mono_ms() + C.seconds * 1000;

	while (tsec__mono_ms() < end && !atomic_load(&C.stop)) {
		nap(500 + (long)(rand_r(&seed) % 2000));
		if (tsec__mono_ms() >= end)
			break;
		int m = (int)(rand_r(&seed) % (unsigned)C.srv->n);   /* a member */

		atomic_fetch_add(&C.faults, 1);
		if (C.brokers && rand_r(&seed) % 2) {
			int b = (int)(rand_r(&seed) % 2);

			if (rand_r(&seed) % 2) {
				atomic_fetch_add(&C.broker_pauses, 1);
				kill(C.bpid[b], SIGSTOP);
				nap(50 + (long)(rand_r(&seed) % 1500));
				kill(C.bpid[b], SIGCONT);
			} else {
				atomic_fetch_add(&C.broker_restarts, 1);
				broker_stop(b, SIGKILL);
				if (!broker_start(b)) {
					fprintf(stderr, "chaos: broker %d did not start again\n", b);
					atomic_store(&C.server_lost, 1);
					break;
				}
			}
		} else if (rand_r(&seed) % 2) {
			atomic_fetch_add(&C.pauses, 1);
			kill(C.srv->pid[m], SIGSTOP);
			nap(50 + (long)(rand_r(&seed) % 1500));
			kill(C.srv->pid[m], SIGCONT);
		} else {
			atomic_fetch_add(&C.restarts, 1);
			if (C.srv == &C.redis ? tu_redis_restart(C.srv, true)
					      : (tu_member_kill(C.srv, m), tu_member_restart(C.srv, m))) {
				fprintf(stderr, "chaos: the server did not start again\n");
				atomic_store(&C.server_lost, 1);
				break;
			}
		}
	}
}

/* The checker's word on each of the first violations. */
static void say(const char *what, const struct chaos_event *a, const struct chaos_event *b)
{
	if (C.quiet)
		return;
	fprintf(stderr, "chaos VIOLATION: %s (lock %d: fence %llu by worker %d [%lld..%lld] rc %d"
		" / fence %llu by worker %d [%lld..%lld] rc %d)\n", what, a->lock,
		(unsigned long long)a->fence, a->worker, (long long)a->inv, (long long)a->ok, a->rc,
		(unsigned long long)b->fence, b->worker, (long long)b->inv, (long long)b->ok, b->rc);
}

static void check(void)
{
	struct chaos_report rep;

	chaos_check(C.ev, C.nev, LOCKS, TTL_MS, C.cached ? LIVE_MS : 0, say, &rep);
	C.first = rep.first;
	atomic_store(&C.violations, rep.violations);
	C.steps = rep.linear_steps;
	C.gave_up = rep.gave_up;
	if (rep.gave_up)
		fprintf(stderr, "chaos: the linearizability search gave up on a key (%ld steps): "
			"the history was not checked whole\n", rep.linear_steps);
}

static void reset(void)
{
	atomic_store(&C.faults, 0);
	atomic_store(&C.pauses, 0);
	atomic_store(&C.restarts, 0);
	atomic_store(&C.hangs, 0);
	atomic_store(&C.drops, 0);
	atomic_store(&C.cuts, 0);
	atomic_store(&C.violations, 0);
	atomic_store(&C.broker_pauses, 0);
	atomic_store(&C.broker_restarts, 0);
	atomic_store(&C.server_lost, 0);
	C.first = NULL;
	C.gave_up = false;
}

static void run(const char *backend, const char *upstream, bool cached, bool brokers)
{
	struct worker w[WORKERS];
	pthread_t th[WORKERS], ft;
	char prefix[64], eps[WORKERS][256];
	long ops[5] = { 0 }, ok[5] = { 0 }, absent = 0, refused = 0;
	struct tu_store final;
	struct tsec_store_opts o = { .backend = backend, .prefix = prefix, .timeout_ms = 1500,
				     .cache_bytes = cached ? 1 << 20 : 0,
				     .cache_live_ms = LIVE_MS };

	reset();
	C.nev = 0;
	C.cached = cached;
	C.brokers = brokers;
	C.srv = backend[0] == 'e' ? &C.etcd : &C.redis;
	atomic_store(&C.stop, 0);
	snprintf(prefix, sizeof(prefix), "chaos-%d-%s%s%s", (int)getpid(), backend,
		 cached ? "-cached" : "", brokers ? "-brokers" : "");
	if (brokers)
		brokers_up(backend, prefix);
	else
		C.npx = WORKERS;
	for (int i = 0; i < WORKERS; i++) {
		int port;

		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		w[i].seed = (unsigned)(i * 7919 + 1);
		if (brokers) {           /* both brokers, failing over */
			w[i].c = broker_client(-1, 4000);
			continue;
		}
		/* On etcd: through the proxy to one member, the others direct,
		 * so a worker whose member hangs fails over. */
		int mem = C.srv == &C.etcd ? i % C.srv->n : 0;

		assert_non_null(w[i].px = tu_proxy_start(C.srv == &C.etcd ? tu_port_of(C.srv->url[mem])
							 : tu_port_of(upstream), &port));
		snprintf(eps[i], sizeof(eps[i]), "%s127.0.0.1:%d", backend[0] == 'e' ? "http://" : "",
			 port);
		for (int k = 0; C.srv == &C.etcd && k < C.srv->n; k++)
			if (k != mem)
				snprintf(eps[i] + strlen(eps[i]), sizeof(eps[i]) - strlen(eps[i]), ",%s",
					 C.srv->url[k]);
		o.endpoints = eps[i];
		tu_store_open_with(&w[i].t, &o);
		C.px[i] = w[i].px;
	}
	for (int i = 0; i < WORKERS; i++)
		pthread_create(&th[i], NULL, work, &w[i]);
	pthread_create(&ft, NULL, faults, C.px);
	server_faults();
	atomic_store(&C.stop, 1);
	pthread_join(ft, NULL);
	for (int i = 0; i < C.npx; i++)
		tu_proxy_set(C.px[i], TU_PASS);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(th[i], NULL);
	/* The final word, read straight from the server after the dust. */
	o.endpoints = upstream;
	o.cache_bytes = 0;
	tu_store_open_with(&final, &o);
	{
		struct worker fw = { .id = -1 };

		fw.t = final;
		for (int lock = 0; lock < LOCKS; lock++)
			do_get(&fw, lock);
	}
	for (size_t i = 0; i < C.nev; i++) {
		ops[C.ev[i].kind]++;
		ok[C.ev[i].kind] += C.ev[i].rc == 0;
		absent += C.ev[i].kind == CH_GET && C.ev[i].rc == TSEC_ENOENT;
		refused += C.ev[i].kind == CH_PUT && chaos_refused(C.ev[i].rc);
	}
	check();
	fprintf(stderr, "chaos %s%s%s: %zu operations (acquire %ld/%ld ok, put %ld/%ld (%ld refused), "
		"get %ld/%ld (%ld not found, %ld failed), renew %ld/%ld, release %ld/%ld; "
		"linearizability search %ld steps), %ld faults injected "
		"(%ld broker pauses, %ld broker restarts, %ld hangs, %ld dropped answers, "
		"%ld connection cuts, %ld server pauses, %ld server restarts), %ld violations%s%s\n",
		brokers ? "brokers over " : "", backend, cached ? " + LocalCache" : "", C.nev,
		ok[CH_ACQ], ops[CH_ACQ], ok[CH_PUT], ops[CH_PUT], refused,
		ok[CH_GET], ops[CH_GET], absent, ops[CH_GET] - ok[CH_GET] - absent, ok[CH_RENEW],
		ops[CH_RENEW], ok[CH_REL], ops[CH_REL], C.steps,
		atomic_load(&C.faults), atomic_load(&C.broker_pauses),
		atomic_load(&C.broker_restarts), atomic_load(&C.hangs),
		atomic_load(&C.drops), atomic_load(&C.cuts), atomic_load(&C.pauses),
		atomic_load(&C.restarts), atomic_load(&C.violations), C.first ? ", the first: " : "",
		C.first ? C.first : "");
	tu_store_close(&final);
	for (int i = 0; i < WORKERS; i++) {
		if (brokers) {
			tsec_client_close(&w[i].c);
			continue;
		}
		tu_store_close(&w[i].t);
		tu_proxy_stop(w[i].px);
	}
	if (brokers)
		brokers_down();
	assert_int_equal(atomic_load(&C.server_lost), 0);
	/* Enough happened for the checks to mean something. */
	assert_true(ok[CH_ACQ] > 0 && ok[CH_PUT] > 0 && ok[CH_GET] > 0);
	assert_int_equal(atomic_load(&C.violations), 0);
	assert_false(C.gave_up);
	reset();
}

/* ---- The checker's logic, on histories with a fault planted each ---- */

static struct chaos_event *ev(enum chaos_kind k, int worker, int64_t inv, int64_t ok,
			      uint64_t fence, int rc)
{
	struct chaos_event e = { .kind = k, .worker = worker, .lock = 0, .rc = rc, .inv = inv,
				 .ok = ok, .fence = fence };

	e.token[0] = (uint8_t)(worker + 1);
	C.ev[C.nev] = e;
	return &C.ev[C.nev++];
}

/* A write of value (fence, worker, seq), or a read of one (seq 0: none). */
static struct chaos_event *val(struct chaos_event *e, int worker, uint32_t seq)
{
	e->vworker = worker;
	e->vseq = seq;
	return e;
}

enum { CLEAN, OVERLAP, OLD_READ, LOST, GRANT_BACK, WRITE_BACK, STALE_WRITE, PHANTOM,
       REFUSED, BACKWARDS, NOT_LINEAR, MUTATIONS };

/*
 * A clean history of one lock: worker 0 holds fence 10, writes, reads
 * and releases, then writes with the released handle and is refused;
 * worker 1 then holds fence 20, writes, reads, releases; a last read sees
 * worker 1's value.  Each mutation plants one fault.
 */
static const char *history(int m)
{
	uint64_t f1 = m == GRANT_BACK ? 5 : 20;
	int last = 1;

	C.nev = 0;
	reset();
	ev(CH_ACQ, 0, 0, 1, 10, 0);
	val(ev(CH_PUT, 0, 2, 3, 10, 0), 0, 1);
	val(ev(CH_GET, 0, 4, 5, 10, 0), 0, 1);
	ev(CH_REL, 0, 6, 7, 10, 0);
	/* The released handle's write: refused, or (STALE_WRITE) accepted. */
	val(ev(CH_PUT, 0, 8, 9, 10, m == STALE_WRITE ? 0 : TSEC_ENOTOWNER), 0, 2);
	/* A second holder: granted before the first let go. */
	ev(CH_ACQ, 1, m == OVERLAP ? 3 : 8, m == OVERLAP ? 4 : 9, f1, 0);
	if (m == NOT_LINEAR) {
		/* Two writes at once, each read after both ended, in turn:
		 * no order of the two fits the three reads. */
		val(ev(CH_PUT, 1, 10, 30, f1, 0), 1, 1);
		val(ev(CH_PUT, 1, 10, 30, f1, 0), 1, 2);
		val(ev(CH_GET, 1, 31, 32, f1, 0), 1, 1);
		val(ev(CH_GET, 1, 33, 34, f1, 0), 1, 2);
		val(ev(CH_GET, 1, 35, 36, f1, 0), 1, 1);
	} else {
		/* BACKWARDS: its outcome unknown (no answer) but read. */
		val(ev(CH_PUT, 1, 10, 11, f1, m == BACKWARDS ? TSEC_EUNKNOWN : 0), 1, 1);
		if (m == OLD_READ)
			val(ev(CH_GET, 1, 12, 13, 10, 0), 0, 1);
		else if (m == PHANTOM)
			val(ev(CH_GET, 1, 12, 13, 99, 0), 5, 5);
		else if (m == REFUSED)
			val(ev(CH_GET, 1, 12, 13, 10, 0), 0, 2);
		else
			val(ev(CH_GET, 1, 12, 13, f1, 0), 1, 1);
	}
	ev(CH_REL, 1, 40, 41, f1, 0);
	/* A fenced write below one already written, accepted. */
	if (m == WRITE_BACK)
		val(ev(CH_PUT, 0, 50, 51, 10, 0), 0, 3);
	/* The last read: worker 1's value; none (LOST); worker 0's
	 * (BACKWARDS: after a read of worker 1's unanswered write). */
	if (m == LOST)
		ev(CH_GET, -1, 5000, 5001, 0, TSEC_ENOENT);
	else if (m == BACKWARDS)
		val(ev(CH_GET, -1, 5000, 5001, 10, 0), 0, 1);
	else
		val(ev(CH_GET, -1, 5000, 5001, f1, 0), 1, last);
	check();
	return C.first;
}

static void test_checker_by_mutation(void **state)
{
	static const char *const want[MUTATIONS] = {
		[CLEAN] = NULL, [OVERLAP] = CH_OVERLAP, [OLD_READ] = CH_OLD_READ, [LOST] = CH_LOST,
		[GRANT_BACK] = CH_GRANT_BACK, [WRITE_BACK] = CH_WRITE_BACK,
		[STALE_WRITE] = CH_STALE_WRITE, [PHANTOM] = CH_PHANTOM, [REFUSED] = CH_REFUSED,
		[BACKWARDS] = CH_BACKWARDS, [NOT_LINEAR] = CH_NOT_LINEAR,
	};

	(void)state;
	C.cached = false;
	C.quiet = true;
	for (int m = 0; m < MUTATIONS; m++) {
		const char *got = history(m);

		if (!want[m] ? got != NULL : !got || strcmp(got, want[m]))
			fail_msg("mutation %d: the checker said \"%s\", not \"%s\"", m,
				 got ? got : "(nothing)", want[m] ? want[m] : "(nothing)");
		if (m == CLEAN)
			assert_int_equal(atomic_load(&C.violations), 0);
	}
	/* A read inside the LocalCache's bound is excused; past it, not. */
	C.cached = true;
	assert_null(history(OLD_READ));
	for (size_t i = 0; i < C.nev; i++)
		if (C.ev[i].kind == CH_GET && C.ev[i].worker == 1)
			C.ev[i].inv = C.ev[i].ok = 11 + LIVE_MS * 1000 + 1;
	reset();
	check();
	assert_non_null(C.first);
	assert_string_equal(C.first, CH_OLD_READ);
	C.cached = false;
	C.quiet = false;
	reset();
	C.nev = 0;
}

static void test_chaos_etcd(void **state)
{
	(void)state;
	run("etcd", C.etcd.endpoints, false, false);
}

static void test_chaos_etcd_cached(void **state)
{
	(void)state;
	run("etcd", C.etcd.endpoints, true, false);
}

static void test_chaos_redis(void **state)
{
	(void)state;
	run("redis", C.redis.endpoints, false, false);
}

static void test_chaos_redis_cached(void **state)
{
	(void)state;
	run("redis", C.redis.endpoints, true, false);
}

static void test_chaos_brokers_etcd(void **state)
{
	(void)state;
	run("etcd", C.etcd.endpoints, false, true);
}

static void test_chaos_brokers_redis(void **state)
{
	(void)state;
	run("redis", C.redis.endpoints, false, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chaos_etcd),
		cmocka_unit_test(test_chaos_etcd_cached),
		cmocka_unit_test(test_chaos_redis),
		cmocka_unit_test(test_chaos_redis_cached),
		cmocka_unit_test_teardown(test_chaos_brokers_etcd, brokers_gone),
		cmocka_unit_test_teardown(test_chaos_brokers_redis, brokers_gone),
	};
	const struct CMUnitTest checker[] = {
		cmocka_unit_test(test_checker_by_mutation),
	};
	const char *s = getenv("CHAOS_SECONDS");
	int failed;

	C.seconds = s && atoi(s) > 0 ? atoi(s) : 6;
	if (getenv("CHAOS_ONLY"))            /* a cmocka pattern: "*redis*" */
		cmocka_set_test_filter(getenv("CHAOS_ONLY"));
	app = tu_who("svc:app");
	pthread_mutex_init(&C.mu, NULL);
	if (!(C.ev = calloc(EVENTS_MAX, sizeof(*C.ev))))
		return 1;
	/* The checker first: a checker that cannot fail proves nothing. */
	if (cmocka_run_group_tests_name("chaos: the checker, by mutation", checker, NULL, NULL)) {
		free(C.ev);
		return 1;
	}
	if (tu_etcd_start(&C.etcd, 3) || tu_redis_start(&C.redis)) {
		fprintf(stderr, "chaos: cannot start etcd and redis-server "
			"(scripts/deps.sh servers installs them)\n");
		tu_server_stop(&C.etcd);
		tu_server_stop(&C.redis);
		return 1;
	}
	failed = cmocka_run_group_tests_name("chaos: locks, fenced writes and reads under faults",
					     tests, NULL, NULL);
	tu_server_stop(&C.etcd);
	tu_server_stop(&C.redis);
	free(C.ev);
	return failed ? 1 : 0;
}
