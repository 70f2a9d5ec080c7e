/*
 * The module's only exported symbol and its state: a compiled policy that
 * reload swaps atomically while other threads keep calling.
 *
 * Readers never wait and take no lock.  Each call announces itself in one
 * of two reader counters chosen by the current epoch, then reads the
 * policy pointer; reload publishes the new pointer, flips the epoch and
 * waits until the old epoch's counter drains before freeing the old
 * policy.  The cost per call is two atomic adds on a counter (on its own
 * cache line); that is the price of letting reload free memory without a
 * reader lock.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "module/module_private.h"

#define TSEC_EXPORT __attribute__((visibility("default")))

#ifndef TSEC_VERSION
#define TSEC_VERSION "0.0.0"
#endif

struct state {
	_Alignas(64) _Atomic(struct tsec__policy *) cur;
	_Atomic uint64_t epoch;
	_Alignas(64) _Atomic int64_t readers[2];
	_Alignas(64) pthread_mutex_t reload_lock; /* serialises writers only */
	const struct tsec_host_api *host;
	struct tsec__certcache *certs;
};

static void host_log(struct state *st, int level, const char *msg)
{
	if (st->host && st->host->log)
		st->host->log(st->host->host, level, msg);
}

/* Enters a read section; returns the counter slot to leave with. */
static inline unsigned read_enter(struct state *st, struct tsec__policy **pol)
{
	for (;;) {
		uint64_t e = atomic_load(&st->epoch);
		unsigned slot = (unsigned)(e & 1);
		atomic_fetch_add(&st->readers[slot], 1);
		if (atomic_load(&st->epoch) == e) {
			*pol = atomic_load(&st->cur);
			return slot;
		}
		/* A reload flipped the epoch under us: retry on the new one. */
		atomic_fetch_sub(&st->readers[slot], 1);
	}
}

static inline void read_leave(struct state *st, unsigned slot)
{
	atomic_fetch_sub_explicit(&st->readers[slot], 1, memory_order_release);
}

static int mod_init(const struct tsec_host_api *host, const char *policy,
		    size_t len, void **out, struct tsec_error *err)
{
	struct tsec__policy *pol = NULL;
	struct state *st;
	int rc;

	if (!out || (!policy && len))
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL argument");
	*out = NULL;
	rc = tsec__policy_compile(policy, len, &pol, err);
	if (rc)
		return rc;
	if (posix_memalign((void **)&st, 64, sizeof(*st))) {
		tsec__policy_free(&pol);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	if (tsec__certcache_new(&st->certs)) {
		tsec__policy_free(&pol);
		free(st);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	atomic_init(&st->cur, pol);
	atomic_init(&st->epoch, 0);
	atomic_init(&st->readers[0], 0);
	atomic_init(&st->readers[1], 0);
	pthread_mutex_init(&st->reload_lock, NULL);
	st->host = host;
	*out = st;
	return 0;
}

static void mod_fini(void *vst)
{
	struct state *st = vst;
	struct tsec__policy *pol;

	if (!st)
		return;
	pol = atomic_load(&st->cur);
	tsec__policy_free(&pol);
	pthread_mutex_destroy(&st->reload_lock);
	tsec__certcache_free(&st->certs);
	free(st);
}

static int mod_reload(void *vst, const char *policy, size_t len,
		      struct tsec_error *err)
{
	struct state *st = vst;
	struct tsec__policy *pol = NULL, *old;
	uint64_t e;
	char msg[96];
	int rc;

	if (!st || (!policy && len))
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL argument");
	rc = tsec__policy_compile(policy, len, &pol, err);
	if (rc) {
		host_log(st, TSEC_LOG_WARN, "policy reload refused; old policy keeps serving");
		return rc;
	}
	pthread_mutex_lock(&st->reload_lock);
	old = atomic_exchange(&st->cur, pol);
	e = atomic_fetch_add(&st->epoch, 1);
	/*
	 * Readers that entered under epoch e may hold `old`; wait for them.
	 * Later readers see the new epoch and therefore the new pointer.
	 */
	while (atomic_load_explicit(&st->readers[e & 1], memory_order_acquire))
		sched_yield();
	pthread_mutex_unlock(&st->reload_lock);
	snprintf(msg, sizeof(msg), "policy reloaded: %u rules", pol->nrules);
	tsec__policy_free(&old);
	host_log(st, TSEC_LOG_INFO, msg);
	return 0;
}

static int mod_evaluate(void *vst, const struct tsec_request *req,
			struct tsec_report *out, struct tsec_error *err)
{
	struct state *st = vst;
	struct tsec__policy *pol;
	unsigned slot;

	if (!st || !req || !out)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL argument");
	slot = read_enter(st, &pol);
	tsec__decide(pol, req, &out->decision, out, NULL, st->certs);
	read_leave(st, slot);
	return 0;
}

/* Evaluate with why-not; writes at most ex_size bytes of *ex. */
static int mod_explain(void *vst, const struct tsec_request *req, struct tsec_report *out,
		       struct tsec_explain *ex, size_t ex_size, struct tsec_error *err)
{
	struct state *st = vst;
	struct tsec__policy *pol;
	struct tsec_explain mine;
	unsigned slot;

	if (!st || !req || !out || !ex)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL argument");
	memset(&mine, 0, sizeof(mine));
	slot = read_enter(st, &pol);
	tsec__decide(pol, req, &out->decision, out, &mine, st->certs);
	read_leave(st, slot);
	mine.explained = 1;
	memcpy(ex, &mine, ex_size < sizeof(mine) ? ex_size : sizeof(mine));
	return 0;
}

__attribute__((hot))
static int mod_check(void *vst, const struct tsec_request *reqs, size_t n,
		     struct tsec_decision *out, struct tsec_error *err)
{
	struct state *st = vst;
	struct tsec__policy *pol;
	unsigned slot;

	if (!st || !reqs || !out || n == 0)
		return tsec__seterr(err, TSEC_EINVAL, "", "NULL argument or empty batch");
	slot = read_enter(st, &pol);
	tsec__decide_batch(pol, reqs, n, out, st->certs);
	read_leave(st, slot);
	return 0;
}

static const struct tsec_module_desc desc = {
	.abi_major = TSEC_MODULE_ABI_MAJOR,
	.abi_minor = TSEC_MODULE_ABI_MINOR,
	.size = sizeof(struct tsec_module_desc),
	.build = TSEC_BUILD_THIS,
	.caps = TSEC_MODULE_CONCURRENT,
	.name = "tinysecurity",
	.version = TSEC_VERSION,
	.init = mod_init,
	.fini = mod_fini,
	.reload = mod_reload,
	.evaluate = mod_evaluate,
	.check = mod_check,
	.lint = tsec__policy_lint,
	.explain = mod_explain,
};

TSEC_EXPORT const struct tsec_module_desc *
tsec_module_entry(const struct tsec_host_api *host);

/*
 * Entry point.  Refuses (returns NULL) a host whose API major differs or
 * whose table is shorter than version 1.0; any later 1.x host, shorter
 * or longer than ours, is served.  Nothing past the 1.0 fields is needed.
 */
TSEC_EXPORT const struct tsec_module_desc *
tsec_module_entry(const struct tsec_host_api *host)
{
	if (!host || host->abi_major != TSEC_MODULE_ABI_MAJOR ||
	    host->size < TSEC_HOST_API_MIN_SIZE)
		return NULL;
	return &desc;
}
