/*
 * The memory backend: values in one hash table, folders in another (each
 * folder counts the values below it, so "is this a folder?" and "does a
 * value stand where a folder must?" are hash lookups), leases in an
 * array.  Listing and recursive delete walk every value: they are rare,
 * writes are not.  For tests and benchmarks: every
 * operation first waits delay_us, outside any lock, so that a simulated
 * remote store's latency overlaps between threads as a real one's does.
 * One read-write lock makes every operation, groups included, atomic.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/storage/backend.h"
#include "broker/storage/lease.h"
#include "common/clock.h"

struct entry {
	struct entry *next;          /* in its bucket */
	uint64_t h;
	size_t klen, len;
	int64_t mtime_ns;
	char *val;
	char key[];
};

/* A folder: a proper prefix of some value's key, counted by values below. */
struct folder {
	struct folder *next;
	uint64_t h;
	size_t klen;
	size_t below;
	char key[];
};

struct table {
	void **b;                    /* buckets of entries or folders */
	size_t mask, n;
};

struct lease {
	char name[TSEC_LOCK_NAME_MAX + 1];
	struct tsec__lease_state st;
};

struct membe {
	struct tsec__backend base;
	pthread_rwlock_t rw;
	uint32_t delay_us;
	struct table vals, dirs;
	struct lease *locks;
	size_t nlocks, caplocks;
};

static struct membe *mb_of(struct tsec__backend *b)
{
	return (struct membe *)b;
}

/* Simulated I/O: real time, whatever the clock (tsec__sleep_ns). */
static void delay(struct membe *m)
{
	if (m->delay_us)
		tsec__sleep_ns((uint64_t)m->delay_us * 1000u);
}

/* Modification times at the coarse clock's resolution (a few ms): this
 * backend is for tests and benchmarks, and the fine clock costs a write
 * more than its lookup does. */
static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Both kinds of node start with next, h, klen; keys follow later. */
#define VAL(p) ((struct entry *)(p))
#define DIR(p) ((struct folder *)(p))

static struct entry *val_find(const struct membe *m, const char *k, size_t n, uint64_t h)
{
	struct entry *e = m->vals.b ? m->vals.b[h & m->vals.mask] : NULL;

	for (; e; e = e->next)
		if (e->h == h && e->klen == n && !memcmp(e->key, k, n))
			return e;
	return NULL;
}

static struct folder *dir_find(const struct membe *m, const char *k, size_t n, uint64_t h)
{
	struct folder *f = m->dirs.b ? m->dirs.b[h & m->dirs.mask] : NULL;

	for (; f; f = f->next)
		if (f->h == h && f->klen == n && !memcmp(f->key, k, n))
			return f;
	return NULL;
}

/* Makes room for `more` nodes (load factor 1).  -1 without memory. */
static int table_reserve(struct table *t, size_t more, bool dirs)
{
	size_t nb = t->b ? t->mask + 1 : 64, i;
	void **b;

	while (nb < t->n + more)
		nb *= 2;
	if (t->b && nb == t->mask + 1)
		return 0;
	if (!(b = calloc(nb, sizeof(*b))))
		return -1;
	for (i = 0; t->b && i <= t->mask; i++) {
		void *p = t->b[i], *next;
		for (; p; p = next) {
			uint64_t h = dirs ? DIR(p)->h : VAL(p)->h;
			void **slot = &b[h & (nb - 1)];
			next = dirs ? (void *)DIR(p)->next : (void *)VAL(p)->next;
			if (dirs)
				DIR(p)->next = *slot;
			else
				VAL(p)->next = *slot;
			*slot = p;
		}
	}
	free(t->b);
	t->b = b;
	t->mask = nb - 1;
	return 0;
}

static void val_link(struct membe *m, struct entry *e)
{
	void **slot = &m->vals.b[e->h & m->vals.mask];

	e->next = *slot;
	*slot = e;
	m->vals.n++;
}

static void val_unlink(struct membe *m, struct entry *e)
{
	struct entry **pp = (struct entry **)&m->vals.b[e->h & m->vals.mask];

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	m->vals.n--;
}

/* The lengths of sk's folders: text[0..len[i]) for i < sk->n - 1. */
static unsigned parents(const struct tsec__skey *sk, size_t *len)
{
	unsigned i;

	for (i = 0; i + 1 < sk->n; i++)
		len[i] = (size_t)(sk->seg[i + 1] - sk->seg[0]) - 1;
	return i;
}

/* Counts one more (or one fewer) value below each of sk's folders; a
 * count reaching 0 frees the folder.  The nodes exist when adding (see
 * prepare). */
static void count_below(struct membe *m, const struct tsec__skey *sk, int delta,
			struct folder **spare)
{
	size_t len[TSEC_KEY_SEGMENTS];
	unsigned np = parents(sk, len);

	for (unsigned i = 0; i < np; i++) {
		uint64_t h = tsec__strhash(sk->text, len[i]);
		struct folder *f = dir_find(m, sk->text, len[i], h), **pp;
		if (!f && delta > 0 && spare && *spare) {
			f = *spare;
			*spare = f->next;
			f->h = h;
			f->klen = len[i];
			f->below = 0;
			memcpy(f->key, sk->text, len[i]);
			f->key[len[i]] = '\0';
			pp = (struct folder **)&m->dirs.b[h & m->dirs.mask];
			f->next = *pp;
			*pp = f;
			m->dirs.n++;
		}
		if (!f)
			continue;
		f->below += (size_t)delta;
		if (f->below == 0) {
			pp = (struct folder **)&m->dirs.b[h & m->dirs.mask];
			while (*pp != f)
				pp = &(*pp)->next;
			*pp = f->next;
			m->dirs.n--;
			free(f);
		}
	}
}

/* 0 nothing, 1 value, 2 folder; the root is always a folder. */
static int kind_of(const struct membe *m, const struct tsec__skey *sk)
{
	size_t n = sk->tlen;
	uint64_t h;

	if (sk->n == 0)
		return 2;
	h = tsec__strhash(sk->text, n);
	if (val_find(m, sk->text, n, h))
		return 1;
	return dir_find(m, sk->text, n, h) ? 2 : 0;
}

static int mb_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	size_t n = sk->tlen;
	uint64_t h = tsec__strhash(sk->text, n);
	const struct entry *e;
	int rc = 0;

	*out = NULL;
	*len = 0;
	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	if (!(e = val_find(m, sk->text, n, h)))
		rc = dir_find(m, sk->text, n, h)
			? tsec__seterr(err, TSEC_EINVAL, sk->text, "'%s' is a folder, not a value", sk->text)
			: tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	else if (e->len > max)
		rc = tsec__seterr(err, TSEC_ETOOBIG, sk->text, "value larger than %zu bytes", max);
	else if (!(*out = malloc(e->len + 1)))
		rc = tsec__seterr(err, TSEC_ENOMEM, sk->text, NULL);
	if (!rc) {
		memcpy(*out, e->val, e->len);
		(*out)[e->len] = '\0';
		*len = e->len;
	}
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

/* Under one read lock: a group (written under the write lock) lands
 * before or after all of them. */
static int mb_get_many(struct tsec__backend *b, const struct tsec__skey *k, size_t n,
		       size_t max, char **out, size_t *len, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	int rc;

	if ((rc = tsec__values_begin(out, len, n, err)))
		return rc;
	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	for (size_t i = 0; i < n && !rc; i++) {
		const struct entry *e = val_find(m, k[i].text, k[i].tlen,
						 tsec__strhash(k[i].text, k[i].tlen));
		if (!e)
			continue;
		if (e->len > max) {
			rc = tsec__seterr(err, TSEC_ETOOBIG, k[i].text, "value larger than %zu bytes",
					  max);
		} else if (!(out[i] = malloc(e->len + 1))) {
			rc = tsec__seterr(err, TSEC_ENOMEM, k[i].text, NULL);
		} else {
			memcpy(out[i], e->val, e->len);
			out[i][e->len] = '\0';
			len[i] = e->len;
		}
	}
	pthread_rwlock_unlock(&m->rw);
	if (rc)
		tsec__values_free(out, len, n);
	return rc;
}

static int mb_kind(struct tsec__backend *b, const struct tsec__skey *sk, int *kind,
		   struct tsec_error *err)
{
	struct membe *m = mb_of(b);

	(void)err;
	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	*kind = kind_of(m, sk);
	pthread_rwlock_unlock(&m->rw);
	return 0;
}

/* Whether key lies below the folder p[0..plen) ("" is the root). */
static bool below(const char *key, size_t klen, const char *p, size_t plen)
{
	return plen == 0 || (klen > plen && key[plen] == '/' && !memcmp(key, p, plen));
}

static int mb_stat(struct tsec__backend *b, const struct tsec__skey *sk,
		   struct tsec_stat *st, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	size_t n = sk->tlen;
	const struct entry *e;
	int rc = 0;

	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	memset(st, 0, sizeof(*st));
	if ((e = val_find(m, sk->text, n, tsec__strhash(sk->text, n)))) {
		st->size = e->len;
		st->mtime_ns = e->mtime_ns;
		st->is_file = 1;
	} else if (kind_of(m, sk) != 2) {
		rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	} else {
		/* A folder: its newest value's time (one pass, as a listing). */
		for (size_t i = 0; m->vals.b && i <= m->vals.mask; i++)
			for (e = m->vals.b[i]; e; e = e->next)
				if (below(e->key, e->klen, sk->text, n) && e->mtime_ns > st->mtime_ns)
					st->mtime_ns = e->mtime_ns;
	}
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

/*
 * Lists by one pass over the values (a listing is rare; a write must
 * stay cheap).  A flat listing names each folder once: the folder nodes
 * directly inside the prefix.
 */
static int mb_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	size_t plen = sk->tlen, cap = 0, skip = plen ? plen + 1 : 0;
	int kind, rc = 0;

	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	kind = kind_of(m, sk);
	if (kind != 2) {
		rc = tsec__list_none(sk, kind, err);
		goto out;
	}
	for (size_t i = 0; m->vals.b && i <= m->vals.mask && !rc; i++)
		for (struct entry *e = m->vals.b[i]; e && !rc; e = e->next)
			if (below(e->key, e->klen, sk->text, plen) &&
			    (recursive || !memchr(e->key + skip, '/', e->klen - skip)))
				rc = tsec__strlist_add(out, &cap, e->key, e->klen, "");
	for (size_t i = 0; !recursive && m->dirs.b && i <= m->dirs.mask && !rc; i++)
		for (struct folder *f = m->dirs.b[i]; f && !rc; f = f->next)
			if (below(f->key, f->klen, sk->text, plen) &&
			    !memchr(f->key + skip, '/', f->klen - skip))
				rc = tsec__strlist_add(out, &cap, f->key, f->klen, "/");
	if (rc) {
		tsec_strlist_free(out);
		rc = tsec__seterr(err, TSEC_ENOMEM, sk->text, "cannot list");
	}
out:
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

/* Removes value e (the lock held). */
static void drop(struct membe *m, struct entry *e)
{
	struct tsec__skey sk;
	struct tsec_error ignore;

	val_unlink(m, e);
	if (!tsec__skey_parse_any(e->key, &sk, &ignore))
		count_below(m, &sk, -1, NULL);
	free(e->val);
	free(e);
}

static int fenced(struct membe *m, const struct tsec__fence *f, struct tsec_error *err);

static int mb_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  const struct tsec__fence *f, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	size_t n = sk->tlen;
	uint64_t h = tsec__strhash(sk->text, n);
	struct entry *e;
	int rc = 0;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	if (f && (rc = fenced(m, f, err))) {
		;
	} else if ((e = val_find(m, sk->text, n, h))) {
		drop(m, e);
	} else if (!dir_find(m, sk->text, n, h)) {
		rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	} else if (!recursive) {
		rc = tsec__seterr(err, TSEC_EINVAL, sk->text,
				  "'%s' is a folder; delete it recursively", sk->text);
	} else {
		for (size_t i = 0; i <= m->vals.mask; i++) {
			struct entry *next;
			for (e = m->vals.b[i]; e; e = next) {
				next = e->next;
				if (below(e->key, e->klen, sk->text, n))
					drop(m, e);
			}
		}
	}
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

/* Why sk cannot take a value now, or 0. */
static int refuse_put(const struct membe *m, const struct tsec__skey *sk,
		      struct tsec_error *err)
{
	size_t len[TSEC_KEY_SEGMENTS], n = sk->tlen;
	unsigned np = parents(sk, len);

	if (dir_find(m, sk->text, n, tsec__strhash(sk->text, n)))
		return tsec__seterr(err, TSEC_EEXIST, sk->text,
				    "'%s' is a folder; a folder is never replaced by a file", sk->text);
	for (unsigned i = 0; i < np; i++)
		if (val_find(m, sk->text, len[i], tsec__strhash(sk->text, len[i])))
			return tsec__seterr(err, TSEC_EEXIST, sk->text,
					    "a value stands where a folder of '%s' must be", sk->text);
	return 0;
}

/* One write of a group, prepared before anything changes. */
struct prep {
	uint64_t h;
	size_t kl;
	struct entry *old;           /* the key's entry, when it has one */
	struct entry *e;             /* else a new entry for it */
	char *val;                   /* the new value's copy */
};

/* Entries for new keys and folder nodes they may need (the lock held). */
static int prepare(struct membe *m, const struct tsec__bput *p, size_t n, struct prep *pr,
		   struct folder **spare)
{
	size_t fresh = 0, dirs = 0, kmax = 0;

	/*
	 * Spare folder nodes are taken by whichever key needs one first
	 * (count_below), so each is sized for the group's longest key.
	 */
	for (size_t i = 0; i < n; i++)
		if (pr[i].kl > kmax)
			kmax = pr[i].kl;
	for (size_t i = 0; i < n; i++) {
		if (pr[i].old)
			continue;
		if (!(pr[i].e = malloc(sizeof(*pr[i].e) + pr[i].kl + 1)))
			return TSEC_ENOMEM;
		pr[i].e->klen = pr[i].kl;
		pr[i].e->h = pr[i].h;
		memcpy(pr[i].e->key, p[i].sk->text, pr[i].kl + 1);
		fresh++;
		/* At most one new folder node per folder of a new key. */
		for (unsigned j = 0; j + 1 < p[i].sk->n; j++, dirs++) {
			struct folder *f = malloc(sizeof(*f) + kmax + 1);
			if (!f)
				return TSEC_ENOMEM;
			f->next = *spare;
			*spare = f;
		}
	}
	if (table_reserve(&m->vals, fresh, false) || table_reserve(&m->dirs, dirs, true))
		return TSEC_ENOMEM;
	return 0;
}

static void free_spare(struct folder *spare)
{
	while (spare) {
		struct folder *next = spare->next;
		free(spare);
		spare = next;
	}
}

/* Applies a prepared group; cannot fail. */
static void apply(struct membe *m, const struct tsec__bput *p, size_t n, struct prep *pr,
		  struct folder **spare)
{
	int64_t t = now_ns();

	for (size_t i = 0; i < n; i++) {
		struct entry *e = pr[i].old;
		if (e) {
			free(e->val);
		} else {
			e = pr[i].e;
			val_link(m, e);
			count_below(m, p[i].sk, 1, spare);
			pr[i].e = NULL;
		}
		e->val = pr[i].val;
		e->len = p[i].len;
		e->mtime_ns = t;
		pr[i].val = NULL;
	}
}

static struct lease *lease_find(struct membe *m, const char *name, bool create)
{
	struct lease *l;

	for (size_t i = 0; i < m->nlocks; i++)
		if (!strcmp(m->locks[i].name, name))
			return &m->locks[i];
	if (!create)
		return NULL;
	if (m->nlocks == m->caplocks) {
		size_t nc = m->caplocks ? m->caplocks * 2 : 16;
		struct lease *nl = realloc(m->locks, nc * sizeof(*nl));
		if (!nl)
			return NULL;
		m->locks = nl;
		m->caplocks = nc;
	}
	l = &m->locks[m->nlocks++];
	memset(l, 0, sizeof(*l));
	snprintf(l->name, sizeof(l->name), "%s", name);
	return l;
}

/* Whether f's lease still holds (the write lock held). */
static int fenced(struct membe *m, const struct tsec__fence *f, struct tsec_error *err)
{
	struct lease *l = lease_find(m, f->name, false);
	struct tsec__lease_state none;

	memset(&none, 0, sizeof(none));
	return tsec__lease_fenced(l ? &l->st : &none, f, tsec__mono_ms(), err);
}

/* Whether g holds (the write lock held): 0 or TSEC_ECHANGED. */
static int guarded(struct membe *m, const struct tsec__guard *g, struct tsec_error *err)
{
	size_t kl = g->sk->tlen;
	struct entry *e = val_find(m, g->sk->text, kl, tsec__strhash(g->sk->text, kl));

	if (g->value ? e && e->len == g->len && !memcmp(e->val, g->value, g->len) : !e)
		return 0;
	return tsec__seterr(err, TSEC_ECHANGED, g->sk->text, "%s changed meanwhile",
			    g->sk->text);
}

static int mb_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, const struct tsec__guard *g,
		       struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	struct prep few[8], *pr = NULL;
	struct folder *spare = NULL;
	int rc = 0;

	memset(few, 0, sizeof(few));
	delay(m);
	/* The copies of the values are made before the lock is taken. */
	if (!(pr = n <= 8 ? few : calloc(n, sizeof(*pr))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	for (size_t i = 0; i < n; i++) {
		pr[i].kl = p[i].sk->tlen;
		pr[i].h = tsec__strhash(p[i].sk->text, pr[i].kl);
		if (!(pr[i].val = malloc(p[i].len ? p[i].len : 1))) {
			rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
			goto freed;
		}
		memcpy(pr[i].val, p[i].value, p[i].len);
	}
	pthread_rwlock_wrlock(&m->rw);
	if ((f && (rc = fenced(m, f, err))) || (g && (rc = guarded(m, g, err))))
		goto out;
	/*
	 * Everything is checked and allocated before anything changes.  A
	 * key that holds a value already needs no check: a value is never a
	 * folder, and never stands where a folder must.
	 */
	for (size_t i = 0; i < n; i++)
		if (!(pr[i].old = val_find(m, p[i].sk->text, pr[i].kl, pr[i].h)) &&
		    (rc = refuse_put(m, p[i].sk, err)))
			goto out;
	if (prepare(m, p, n, pr, &spare)) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	apply(m, p, n, pr, &spare);
out:
	pthread_rwlock_unlock(&m->rw);
freed:
	for (size_t i = 0; pr && i < n; i++) {
		free(pr[i].e);
		free(pr[i].val);
	}
	free_spare(spare);
	if (pr != few)
		free(pr);
	return rc;
}

static int mb_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, const struct tsec__fence *f,
		   struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	size_t sn = src->tlen, dn = dst->tlen;
	uint64_t sh = tsec__strhash(src->text, sn), dh = tsec__strhash(dst->text, dn);
	struct folder *spare = NULL;
	struct entry *e, *moved = NULL;
	int rc = 0;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	if (f && (rc = fenced(m, f, err)))
		goto out;
	if (!(e = val_find(m, src->text, sn, sh))) {
		rc = dir_find(m, src->text, sn, sh)
			? tsec__seterr(err, TSEC_EINVAL, src->text, "'%s' is a folder; only values move",
				       src->text)
			: tsec__seterr(err, TSEC_ENOENT, src->text, "%s: not found", src->text);
		goto out;
	}
	if (val_find(m, dst->text, dn, dh) || dir_find(m, dst->text, dn, dh)) {
		rc = tsec__seterr(err, TSEC_EEXIST, dst->text, "'%s' exists; move never replaces",
				  dst->text);
		goto out;
	}
	if ((rc = refuse_put(m, dst, err)))
		goto out;
	/* Everything the move needs, allocated first; then it cannot fail,
	 * and the value is never under two names. */
	if (!(moved = malloc(sizeof(*moved) + dn + 1)) || table_reserve(&m->dirs, dst->n, true)) {
		rc = tsec__seterr(err, TSEC_ENOMEM, dst->text, NULL);
		goto out;
	}
	for (unsigned j = 0; j + 1 < dst->n; j++) {
		struct folder *fo = malloc(sizeof(*fo) + dn + 1);
		if (!fo) {
			rc = tsec__seterr(err, TSEC_ENOMEM, dst->text, NULL);
			goto out;
		}
		fo->next = spare;
		spare = fo;
	}
	*moved = *e;
	moved->h = dh;
	moved->klen = dn;
	memcpy(moved->key, dst->text, dn + 1);
	val_unlink(m, e);
	count_below(m, src, -1, NULL);
	free(e);
	val_link(m, moved);
	count_below(m, dst, 1, &spare);
	moved = NULL;
out:
	pthread_rwlock_unlock(&m->rw);
	free(moved);
	free_spare(spare);
	return rc;
}

static int mb_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		       const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	struct lease *l;
	int64_t now = tsec__mono_ms();
	bool dirty;
	int rc;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	if (!(l = lease_find(m, name, true)))
		rc = tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	else if ((rc = tsec__lease_try(&l->st, waiter, ttl_ms, now, out, &dirty)))
		tsec__seterr(err, rc, name, "the lock is held or promised to a waiter");
	else
		out->expires_ms = tsec__wall_of(out->expires_ms, now);
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

static void mb_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16])
{
	struct membe *m = mb_of(b);
	struct lease *l;

	pthread_rwlock_wrlock(&m->rw);
	if ((l = lease_find(m, name, false)))
		tsec__lease_unwait(&l->st, waiter);
	pthread_rwlock_unlock(&m->rw);
}

static int owned(struct membe *m, const char *name, const uint8_t token[16], uint64_t ttl_ms,
		 int64_t *expires, struct tsec_error *err)
{
	struct tsec__lease_state none;
	struct lease *l;
	int64_t now = tsec__mono_ms();
	int rc;

	delay(m);
	memset(&none, 0, sizeof(none));
	pthread_rwlock_wrlock(&m->rw);
	l = lease_find(m, name, false);
	if (!(rc = tsec__lease_owned(l ? &l->st : &none, token, now, name, err))) {
		if (ttl_ms)
			*expires = tsec__wall_of(l->st.expires_ms = tsec__deadline_after(now, ttl_ms),
						 now);
		else
			tsec__lease_release(&l->st);
	}
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

static int mb_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			 uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	return owned(mb_of(b), name, token, ttl_ms, expires_ms, err);
}

static int mb_lock_release(struct tsec__backend *b, const char *name,
			   const uint8_t token[16], struct tsec_error *err)
{
	int64_t unused;

	return owned(mb_of(b), name, token, 0, &unused, err);
}

static void mb_close(struct tsec__backend *b)
{
	struct membe *m = mb_of(b);

	if (!m)
		return;
	for (size_t i = 0; m->vals.b && i <= m->vals.mask; i++) {
		struct entry *e, *next;
		for (e = m->vals.b[i]; e; e = next) {
			next = e->next;
			free(e->val);
			free(e);
		}
	}
	for (size_t i = 0; m->dirs.b && i <= m->dirs.mask; i++) {
		struct folder *f, *next;
		for (f = m->dirs.b[i]; f; f = next) {
			next = f->next;
			free(f);
		}
	}
	free(m->vals.b);
	free(m->dirs.b);
	free(m->locks);
	pthread_rwlock_destroy(&m->rw);
	free(m);
}

static const struct tsec__backend_ops memory_ops = {
	.name = "memory",
	.close = mb_close,
	.get = mb_get,
	.get_many = mb_get_many,
	.kind = mb_kind,
	.stat = mb_stat,
	.list = mb_list,
	.del = mb_del,
	.move = mb_move,
	.put_many = mb_put_many,
	.lock_try = mb_lock_try,
	.lock_unwait = mb_lock_unwait,
	.lock_renew = mb_lock_renew,
	.lock_release = mb_lock_release,
};

int tsec__memory_open(struct tsec__backend **out, uint32_t delay_us, struct tsec_error *err)
{
	struct membe *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	m->base.ops = &memory_ops;
	m->delay_us = delay_us;
	pthread_rwlock_init(&m->rw, NULL);
	*out = &m->base;
	return 0;
}
