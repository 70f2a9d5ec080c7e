/*
 * Chaos: workers take locks, write under them (fenced), read, renew and
 * release against real etcd and redis, each through its own fault proxy
 * (tests/faults.h), while a fault thread hangs, delays (a hang released
 * later forwards what it held), drops answers and cuts connections at
 * random, and the main thread pauses the server (SIGSTOP) or kills it
 * and starts it again on its data.  Every operation is recorded (invoked, answered, outcome,
 * value, fence) and the history is checked afterwards:
 *
 *   - no two grants of one lock overlap: a grant's answer never comes
 *     before the previous holder's validity ended (its acquire or last
 *     renew, measured from before it was sent, plus the lease; or its
 *     release), and no fence is handed out twice;
 *   - no acknowledged write is lost or reverted: a read invoked after a
 *     fenced put was acknowledged sees that fence or a later one (with a
 *     LocalCache: after cache_live_ms), and so does the final read; a
 *     read that finds no value is a read of fence 0 (a lost write), and
 *     reads that failed are counted;
 *   - fences rise: no grant, and no accepted fenced write, carries a
 *     fence below one answered before it was asked for.
 *
 * The checker is itself tested first, by mutation: a clean history must
 * pass and each planted fault (a second holder, a stale read, a lost
 * write, a grant and a write whose fence went back; a stale read past
 * the LocalCache's bound) must be reported by name.  etcd is a 3-member
 * cluster; a worker reaches one member through its proxy and the other
 * two directly, and the server faults pause or restart a random member.
 * The broker cases put two tsec-brokers between the workers and the
 * backend (each through its own fault proxy; workers fail over between
 * them) and also pause a broker or kill it (-9) and start it again.
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

enum kind { ACQ, PUT, GET, RENEW, REL };

struct event {
	enum kind kind;
	int worker, lock, rc;
	int64_t inv, ok;             /* monotonic ms: invoked, answered */
	uint64_t fence;              /* ACQ: granted; PUT: written; GET: read */
	uint8_t token[16];
};

static struct {
	struct tu_server etcd, redis;
	pthread_mutex_t mu;
	struct event *ev;
	size_t nev;
	atomic_int stop;
	struct tu_server *srv;       /* the server of the run */
	atomic_long faults, violations, pauses, restarts, hangs, drops, cuts;
	const char *first;           /* the first violation's kind */
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

static void record(const struct event *e)
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

/* The fence written in a value "FENCE:worker:seq"; 0 if none. */
static uint64_t fence_in(const char *v, size_t n)
{
	uint64_t f = 0;

	for (size_t i = 0; i < n && v[i] >= '0' && v[i] <= '9'; i++)
		f = f * 10 + (uint64_t)(v[i] - '0');
	return f;
}

static void do_get(struct worker *w, int lock)
{
	struct event e = { GET, w->id, lock, 0, tsec__mono_ms(), 0, 0, { 0 } };
	char k[32], *v = NULL;
	size_t n;

	key_of(lock, k, sizeof(k));
	e.rc = w_get(w, k, &v, &n);
	e.ok = tsec__mono_ms();
	if (!e.rc)
		e.fence = fence_in(v, n);
	free(v);
	record(&e);
}

static void *work(void *arg)
{
	struct worker *w = arg;
	int seq = 0;

	while (!atomic_load(&C.stop)) {
		int lock = (int)(rand_r(&w->seed) % LOCKS);
		char name[16], k[32], val[64];
		struct event a = { ACQ, w->id, lock, 0, tsec__mono_ms(), 0, 0, { 0 } };
		struct tsec_lock lk;

		snprintf(name, sizeof(name), "chaos%d", lock);
		key_of(lock, k, sizeof(k));
		a.rc = w_acquire(w, name, &lk);
		a.ok = tsec__mono_ms();
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
			struct event p = { PUT, w->id, lock, 0, tsec__mono_ms(), 0, lk.fence, { 0 } };
			struct event r = { RENEW, w->id, lock, 0, 0, 0, lk.fence, { 0 } };
			struct tsec_put put = { k, val, 0 };

			memcpy(p.token, lk.token, 16);
			put.len = (size_t)snprintf(val, sizeof(val), "%llu:%d:%d",
						   (unsigned long long)lk.fence, w->id, ++seq);
			p.rc = w_put(w, &lk, &put);
			p.ok = tsec__mono_ms();
			record(&p);
			do_get(w, lock);
			memcpy(r.token, lk.token, 16);
			r.inv = tsec__mono_ms();
			r.rc = w_renew(w, &lk);
			r.ok = tsec__mono_ms();
			record(&r);
			if (r.rc)
				break;
		}
		{
			struct event rl = { REL, w->id, lock, 0, tsec__mono_ms(), 0, lk.fence, { 0 } };

			memcpy(rl.token, lk.token, 16);
			rl.rc = w_release(w, &lk);
			rl.ok = tsec__mono_ms();
			record(&rl);
		}
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
	pid_t pid = fork();

	if (pid == 0) {
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

static int by_fence(const void *a, const void *b)
{
	const struct event *x = *(const struct event *const *)a, *y = *(const struct event *const *)b;

	return x->fence < y->fence ? -1 : x->fence > y->fence;
}

static int by_ok(const void *a, const void *b)
{
	const struct event *x = *(const struct event *const *)a, *y = *(const struct event *const *)b;

	return x->ok < y->ok ? -1 : x->ok > y->ok;
}

static void violation(const char *what, const struct event *a, const struct event *b)
{
	if (!C.first)
		C.first = what;
	if (atomic_fetch_add(&C.violations, 1) >= 20 || C.quiet)
		return;                  /* the first few say enough */
	fprintf(stderr, "chaos VIOLATION: %s (lock %d: fence %llu by worker %d [%lld..%lld] / "
		"fence %llu by worker %d [%lld..%lld])\n", what, a->lock,
		(unsigned long long)a->fence, a->worker, (long long)a->inv, (long long)a->ok,
		(unsigned long long)b->fence, b->worker, (long long)b->inv, (long long)b->ok);
}

/*
 * When the holder of grant g stopped believing it held the lock: its
 * acquire or last successful renew, from when it was sent, plus the
 * lease; or earlier, when it released or a renew failed.  ops: the
 * lock's renews and releases, sorted by fence.
 */
/*
 * Events e[0..n) (grants, or accepted fenced writes, of one lock): none
 * may carry a fence below one answered before it was invoked.  Sorts e
 * by answer.
 */
static void rising(const char *what, const struct event **e, size_t n)
{
	const struct event **top = calloc(n + 1, sizeof(*top));

	assert_non_null(top);
	qsort(e, n, sizeof(*e), by_ok);
	for (size_t i = 0; i < n; i++)   /* the highest fence answered up to i */
		top[i] = i && top[i - 1]->fence > e[i]->fence ? top[i - 1] : e[i];
	for (size_t j = 0; j < n; j++) {
		size_t lo = 0, hi = n;

		while (lo < hi) {        /* answered before e[j] was invoked */
			size_t mid = (lo + hi) / 2;
			if (e[mid]->ok < e[j]->inv)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo && top[lo - 1]->fence > e[j]->fence)
			violation(what, top[lo - 1], e[j]);
	}
	free(top);
}

static int64_t valid_end(const struct event *g, const struct event **ops, size_t n)
{
	int64_t end = g->inv + TTL_MS, cut = INT64_MAX;
	size_t lo = 0, hi = n;

	while (lo < hi) {                /* the first op of g's fence */
		size_t mid = (lo + hi) / 2;
		if (ops[mid]->fence < g->fence)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < n && ops[i]->fence == g->fence; i++) {
		const struct event *e = ops[i];

		if (e->worker != g->worker || memcmp(e->token, g->token, 16))
			continue;
		if (e->kind == RENEW && !e->rc && e->inv + TTL_MS > end)
			end = e->inv + TTL_MS;
		if ((e->kind == REL || (e->kind == RENEW && e->rc)) && e->inv < cut)
			cut = e->inv;
	}
	return cut < end ? cut : end;
}

static void check(void)
{
	const struct event **g = calloc(C.nev + 1, sizeof(*g));
	const struct event **ops = calloc(C.nev + 1, sizeof(*ops));
	const struct event **puts = calloc(C.nev + 1, sizeof(*puts));
	uint64_t *maxf = calloc(C.nev + 1, sizeof(*maxf));

	assert_true(g && ops && puts && maxf);
	for (int lock = 0; lock < LOCKS; lock++) {
		size_t n = 0, no = 0, np = 0;

		for (size_t i = 0; i < C.nev; i++) {
			const struct event *e = &C.ev[i];

			if (e->lock != lock)
				continue;
			if (e->kind == ACQ && !e->rc)
				g[n++] = e;
			else if (e->kind == RENEW || e->kind == REL)
				ops[no++] = e;
			else if (e->kind == PUT && !e->rc)
				puts[np++] = e;
		}
		/* (rising() sorts g and puts by answer; both are sorted again
		 * below as each check needs.) */
		/* Fences rise: no grant, and no accepted fenced write, carries a
		 * fence below one granted or written before it was asked for. */
		rising("a grant below a fence already granted", g, n);
		rising("a fenced write accepted below a fence already written", puts, np);
		qsort(g, n, sizeof(*g), by_fence);
		qsort(ops, no, sizeof(*ops), by_fence);
		for (size_t i = 1; i < n; i++) {
			if (g[i]->fence == g[i - 1]->fence)
				violation("one fence granted twice", g[i - 1], g[i]);
			else if (g[i]->ok < valid_end(g[i - 1], ops, no))
				violation("a grant while the previous holder's lease was valid",
					  g[i - 1], g[i]);
		}
		/* No acknowledged write reverted: a read invoked after a put's
		 * answer (plus the cache's bound) sees at least its fence. */
		qsort(puts, np, sizeof(*puts), by_ok);
		for (size_t i = 0; i < np; i++)
			maxf[i] = i && maxf[i - 1] > puts[i]->fence ? maxf[i - 1] : puts[i]->fence;
		for (size_t j = 0; j < C.nev; j++) {
			const struct event *r = &C.ev[j];
			int64_t before = r->inv - (C.cached ? LIVE_MS : 0);
			size_t lo = 0, hi = np;

			/* A read that failed says nothing, but "not found" says
			 * the value is gone: that is a read of fence 0. */
			if (r->kind != GET || (r->rc && r->rc != TSEC_ENOENT) || r->lock != lock)
				continue;
			while (lo < hi) {        /* puts answered before `before` */
				size_t mid = (lo + hi) / 2;
				if (puts[mid]->ok < before)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo && (r->rc ? 0 : r->fence) < maxf[lo - 1]) {
				size_t k = lo - 1;

				while (k && puts[k]->fence != maxf[lo - 1])
					k--;
				violation(r->rc ? "an acknowledged write lost (the value is gone)"
						: "a read older than an acknowledged write", puts[k], r);
			}
		}
	}
	free(g);
	free(ops);
	free(puts);
	free(maxf);
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
}

static void run(const char *backend, const char *upstream, bool cached, bool brokers)
{
	struct worker w[WORKERS];
	pthread_t th[WORKERS], ft;
	char prefix[64], eps[WORKERS][256];
	long ops[5] = { 0 }, ok[5] = { 0 }, absent = 0;
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
		absent += C.ev[i].kind == GET && C.ev[i].rc == TSEC_ENOENT;
	}
	check();
	fprintf(stderr, "chaos %s%s%s: %zu operations (acquire %ld/%ld ok, put %ld/%ld, get %ld/%ld "
		"(%ld not found, %ld failed), renew %ld/%ld, release %ld/%ld), %ld faults injected "
		"(%ld broker pauses, %ld broker restarts, %ld hangs, %ld dropped answers, "
		"%ld connection cuts, %ld server pauses, %ld server restarts), %ld violations\n",
		brokers ? "brokers over " : "", backend, cached ? " + LocalCache" : "", C.nev,
		ok[ACQ], ops[ACQ], ok[PUT], ops[PUT],
		ok[GET], ops[GET], absent, ops[GET] - ok[GET] - absent, ok[RENEW], ops[RENEW],
		ok[REL], ops[REL], atomic_load(&C.faults), atomic_load(&C.broker_pauses),
		atomic_load(&C.broker_restarts), atomic_load(&C.hangs),
		atomic_load(&C.drops), atomic_load(&C.cuts), atomic_load(&C.pauses),
		atomic_load(&C.restarts), atomic_load(&C.violations));
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
	assert_true(ok[ACQ] > 0 && ok[PUT] > 0 && ok[GET] > 0);
	assert_int_equal(atomic_load(&C.violations), 0);
	reset();
}

/* ---- The checker, tested by mutation (issue 34, item 14) ---- */

static void ev(enum kind k, int worker, int64_t inv, int64_t ok, uint64_t fence, int rc)
{
	struct event e = { k, worker, 0, rc, inv, ok, fence, { (uint8_t)(worker + 1) } };

	C.ev[C.nev++] = e;
}

/*
 * A clean history of one lock: worker 0 holds fence 10, writes and reads
 * it and releases; worker 1 then holds fence 20, writes, reads, releases;
 * a last read sees 20.  mutation 0 leaves it clean; each other one
 * changes one event into a fault the checker must report.
 */
static const char *history(int mutation)
{
	C.nev = 0;
	reset();
	ev(ACQ, 0, 0, 1, 10, 0);
	ev(PUT, 0, 2, 3, 10, 0);
	ev(GET, 0, 4, 5, 10, 0);
	ev(REL, 0, 6, 7, 10, 0);
	/* 1, a second holder: granted while worker 0's lease was valid. */
	ev(ACQ, 1, mutation == 1 ? 3 : 8, mutation == 1 ? 4 : 9, 20, 0);
	/* 4, a fence going back: worker 1's grant below worker 0's. */
	if (mutation == 4)
		C.ev[C.nev - 1].fence = 5;
	ev(PUT, 1, 10, 11, mutation == 4 ? 5 : 20, 0);
	/* 2, a stale read: worker 1 reads worker 0's value after its own
	 * write was acknowledged (no LocalCache: no bound to excuse it). */
	ev(GET, 1, 12, 13, mutation == 2 ? 10 : (mutation == 4 ? 5 : 20), 0);
	ev(REL, 1, 14, 15, mutation == 4 ? 5 : 20, 0);
	/* 3, a lost write: the last read finds no value at all. */
	ev(GET, -1, 5000, 5001, mutation == 3 ? 0 : (mutation == 4 ? 5 : 20),
	   mutation == 3 ? TSEC_ENOENT : 0);
	/* 5, a fenced write below one already written, accepted. */
	if (mutation == 5)
		ev(PUT, 0, 20, 21, 10, 0);
	check();
	return C.first;
}

static void test_checker_by_mutation(void **state)
{
	static const char *const want[] = {
		NULL,
		"a grant while the previous holder's lease was valid",
		"a read older than an acknowledged write",
		"an acknowledged write lost (the value is gone)",
		"a grant below a fence already granted",
		"a fenced write accepted below a fence already written",
	};

	(void)state;
	C.cached = false;
	C.quiet = true;
	for (int m = 0; m < (int)(sizeof(want) / sizeof(want[0])); m++) {
		const char *got = history(m);

		if (!want[m] ? got != NULL : !got || strcmp(got, want[m]))
			fail_msg("mutation %d: the checker said \"%s\", not \"%s\"", m,
				 got ? got : "(nothing)", want[m] ? want[m] : "(nothing)");
		if (m == 0)
			assert_int_equal(atomic_load(&C.violations), 0);
	}
	/* A read inside the LocalCache's bound is excused; past it, not. */
	C.cached = true;
	assert_null(history(2));
	C.ev[6].inv = C.ev[6].ok = 11 + LIVE_MS + 1;
	reset();
	check();
	assert_string_equal(C.first, "a read older than an acknowledged write");
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
