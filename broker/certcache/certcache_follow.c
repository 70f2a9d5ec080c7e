/*
 * The certificate cache following a shared store: the store's feed
 * (tsec_store_watch) names the keys other writers changed; a thread of
 * the follower's own reads each certificate key again (a feed callback
 * must not call into the store) and keeps which certificate came from
 * which key, so a renewal replaces the one it renews and a deletion
 * removes it.  A feed that broke reads every key again, and what is no
 * longer stored goes.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tinysecurity/certcache.h"
#include "tinysecurity/store.h"
#include "broker/certcache/certcache_private.h"
#include "common/error.h"

#define QUEUE_MAX 4096               /* past this, every key is read again */

/* A certificate key and the certificate last read from it. */
struct kept {
	char *key;
	uint8_t id[32];
	bool seen;                   /* in the last full reading */
};

struct tsec__follow {
	struct tsec_certcache *c;
	struct tsec_store *s;
	const struct tsec_principal *who;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, all;
	char **queue;                /* keys to read again (under mu) */
	size_t nq;
	struct kept *kept;           /* the thread's own */
	size_t nkept, capkept;
};

/* certificates/<issuer>/<domain>/<domain>.crt */
static bool cert_key(const char *k)
{
	size_t n = strlen(k);
	int slashes = 0;

	for (const char *p = k; *p; p++)
		slashes += *p == '/';
	return n > 17 && !strncmp(k, "certificates/", 13) && slashes == 3 &&
	       !strcmp(k + n - 4, ".crt");
}

static void changed(void *ctx, const char *key)
{
	struct tsec__follow *f = ctx;
	char *copy;

	if (key && !cert_key(key))
		return;
	pthread_mutex_lock(&f->mu);
	if (!key || f->nq == QUEUE_MAX || !(copy = strdup(key)))
		f->all = true;
	else
		f->queue[f->nq++] = copy;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static struct kept *kept_find(struct tsec__follow *f, const char *key)
{
	for (size_t i = 0; i < f->nkept; i++)
		if (!strcmp(f->kept[i].key, key))
			return &f->kept[i];
	return NULL;
}

/* Removes the certificate kept for k unless another key holds it too. */
static void drop_cert(struct tsec__follow *f, const struct kept *k)
{
	for (size_t i = 0; i < f->nkept; i++)
		if (&f->kept[i] != k && !memcmp(f->kept[i].id, k->id, 32))
			return;
	tsec_certcache_remove(f->c, k->id);
}

static void kept_drop(struct tsec__follow *f, struct kept *k)
{
	drop_cert(f, k);
	free(k->key);
	*k = f->kept[--f->nkept];
}

/* Reads key again: inserts what it holds, replacing what it held. */
static void read_key(struct tsec__follow *f, const char *key)
{
	struct kept *k = kept_find(f, key);
	struct tsec_error err;
	uint8_t id[32];
	char *pem = NULL;
	size_t len;
	int rc = tsec_store_get(f->s, f->who, key, &pem, &len, &err);

	if (rc == TSEC_ENOENT) {
		if (k)
			kept_drop(f, k);
		return;
	}
	if (rc)
		return;                  /* refused or unreadable: as fill skips it */
	rc = tsec__certcache_insert_id(f->c, pem, len, NULL, id, &err);
	free(pem);
	if (rc && rc != TSEC_EEXIST)
		return;
	if (k) {
		if (memcmp(k->id, id, 32)) {
			drop_cert(f, k);
			memcpy(k->id, id, 32);
		}
		k->seen = true;
		return;
	}
	if (f->nkept == f->capkept) {
		size_t cap = f->capkept ? 2 * f->capkept : 64;
		struct kept *nk = realloc(f->kept, cap * sizeof(*nk));

		if (!nk)
			return;
		f->kept = nk;
		f->capkept = cap;
	}
	if (!(f->kept[f->nkept].key = strdup(key)))
		return;
	memcpy(f->kept[f->nkept].id, id, 32);
	f->kept[f->nkept++].seen = true;
}

/* Every certificate key again; what is no longer listed goes. */
static int read_all(struct tsec__follow *f, struct tsec_error *err)
{
	struct tsec_strlist l = { 0 };
	int rc = tsec_store_list(f->s, f->who, "certificates", 1, &l, err);

	if (rc == TSEC_ENOENT)
		rc = 0;
	if (rc)
		return rc;
	for (size_t i = 0; i < f->nkept; i++)
		f->kept[i].seen = false;
	for (size_t i = 0; i < l.n; i++)
		if (cert_key(l.v[i]))
			read_key(f, l.v[i]);
	for (size_t i = 0; i < f->nkept;)
		if (!f->kept[i].seen)
			kept_drop(f, &f->kept[i]);
		else
			i++;
	tsec_strlist_free(&l);
	return 0;
}

static void *follow_thread(void *arg)
{
	struct tsec__follow *f = arg;
	bool retry = false;              /* a full reading failed */

	for (;;) {
		char **q;
		size_t nq;
		bool all;

		pthread_mutex_lock(&f->mu);
		while (!f->stop && !f->all && !f->nq) {
			struct timespec until;

			if (!retry) {
				pthread_cond_wait(&f->cv, &f->mu);
				continue;
			}
			/* The store was not there: read everything again in a
			 * second, or at the next change. */
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 1;
			if (pthread_cond_timedwait(&f->cv, &f->mu, &until))
				f->all = true;
		}
		if (f->stop) {
			pthread_mutex_unlock(&f->mu);
			return NULL;
		}
		q = f->queue;
		nq = f->nq;
		all = f->all;
		f->queue = calloc(QUEUE_MAX, sizeof(*f->queue));
		f->nq = 0;
		f->all = false;
		if (!f->queue) {         /* keep the old one; read everything */
			f->queue = q;
			q = NULL;
			all = true;
			for (size_t i = 0; i < nq; i++)
				free(f->queue[i]);
			nq = 0;
		}
		pthread_mutex_unlock(&f->mu);
		if (all) {
			struct tsec_error err;

			retry = read_all(f, &err) != 0;
		}
		for (size_t i = 0; i < nq; i++) {
			if (!all)
				read_key(f, q[i]);
			free(q[i]);
		}
		free(q);
	}
}

static void follow_free(struct tsec__follow *f)
{
	for (size_t i = 0; i < f->nq; i++)
		free(f->queue[i]);
	free(f->queue);
	for (size_t i = 0; i < f->nkept; i++)
		free(f->kept[i].key);
	free(f->kept);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

int tsec_certcache_follow(struct tsec_certcache *c, struct tsec_store *s,
			  const struct tsec_principal *who, struct tsec_error *err)
{
	struct tsec__follow *f;
	int rc;

	if (!c || !s || !who)
		return tsec__seterr(err, TSEC_EINVAL, "", "no cache, store or principal");
	if (*tsec__certcache_follow_slot(c))
		return tsec__seterr(err, TSEC_EEXIST, "", "the cache follows a store already");
	if (!(f = calloc(1, sizeof(*f))) || !(f->queue = calloc(QUEUE_MAX, sizeof(*f->queue)))) {
		free(f);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	f->c = c;
	f->s = s;
	f->who = who;
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	/* Watch first, then read: a change made between the two is read
	 * again, never missed. */
	if ((rc = tsec_store_watch(s, changed, f, err))) {
		follow_free(f);
		return rc;
	}
	if ((rc = read_all(f, err)) || (rc = pthread_create(&f->thread, NULL, follow_thread, f)
					 ? tsec__seterr(err, TSEC_ENOMEM, "", "no thread") : 0)) {
		tsec_store_unwatch(s, changed, f);
		follow_free(f);
		return rc;
	}
	*tsec__certcache_follow_slot(c) = f;
	return 0;
}

void tsec_certcache_unfollow(struct tsec_certcache *c)
{
	struct tsec__follow *f = c ? *tsec__certcache_follow_slot(c) : NULL;

	if (!f)
		return;
	tsec_store_unwatch(f->s, changed, f);
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->thread, NULL);
	*tsec__certcache_follow_slot(c) = NULL;
	follow_free(f);
}
