/*
 * The memory backend: values in one sorted array (binary search for a
 * key, a contiguous run for a prefix), folders implied by the keys below
 * them, leases in a second array.  For tests and benchmarks: every
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

struct entry {
	char *key;
	char *val;
	size_t len;
	int64_t mtime_ns;
};

struct lease {
	char name[TSEC_LOCK_NAME_MAX + 1];
	struct tsec__lease_state st;
};

struct membe {
	struct tsec__backend base;
	pthread_rwlock_t rw;
	uint32_t delay_us;
	struct entry *e;
	size_t n, cap;
	struct lease *locks;
	size_t nlocks, caplocks;
};

static struct membe *mb_of(struct tsec__backend *b)
{
	return (struct membe *)b;
}

static void delay(struct membe *m)
{
	struct timespec ts;

	if (!m->delay_us)
		return;
	ts.tv_sec = m->delay_us / 1000000;
	ts.tv_nsec = (long)(m->delay_us % 1000000) * 1000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The first entry whose key is >= key. */
static size_t lower(const struct membe *m, const char *key)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(m->e[mid].key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct entry *find(const struct membe *m, const char *key)
{
	size_t i = lower(m, key);

	return i < m->n && !strcmp(m->e[i].key, key) ? &m->e[i] : NULL;
}

/* Whether some value lies below folder key ("" is the root). */
static bool has_below(const struct membe *m, const char *key)
{
	char p[TSEC_KEY_MAX + 2];
	size_t i;

	if (!*key)
		return m->n > 0;
	snprintf(p, sizeof(p), "%s/", key);
	i = lower(m, p);
	return i < m->n && !strncmp(m->e[i].key, p, strlen(p));
}

/* 0 nothing, 1 value, 2 folder; the root is always a folder. */
static int kind_of(const struct membe *m, const struct tsec__skey *sk)
{
	if (sk->n == 0)
		return 2;
	if (find(m, sk->text))
		return 1;
	return has_below(m, sk->text) ? 2 : 0;
}

/* Whether a value stands where one of sk's folders must be. */
static bool parent_is_value(const struct membe *m, const struct tsec__skey *sk)
{
	char p[TSEC_KEY_MAX + 1];

	for (unsigned i = 0; i + 1 < sk->n; i++) {
		size_t len = (size_t)(sk->seg[i + 1] - sk->seg[0]) - 1;
		memcpy(p, sk->text, len);
		p[len] = '\0';
		if (find(m, p))
			return true;
	}
	return false;
}

static int mb_get(struct tsec__backend *b, const struct tsec__skey *sk, size_t max,
		  char **out, size_t *len, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	const struct entry *e;
	int rc = 0;

	*out = NULL;
	*len = 0;
	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	if (!(e = find(m, sk->text)))
		rc = has_below(m, sk->text)
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

static int mb_stat(struct tsec__backend *b, const struct tsec__skey *sk,
		   struct tsec_stat *st, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	const struct entry *e;
	int rc = 0;

	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	memset(st, 0, sizeof(*st));
	if ((e = find(m, sk->text))) {
		st->size = e->len;
		st->mtime_ns = e->mtime_ns;
		st->is_file = 1;
	} else if (kind_of(m, sk) != 2) {
		rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	}
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

static int add(struct tsec_strlist *l, size_t *cap, const char *k, size_t n,
	       const char *suffix)
{
	char *s;

	if (l->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		char **v = realloc(l->v, nc * sizeof(*v));
		if (!v)
			return -1;
		l->v = v;
		*cap = nc;
	}
	if (asprintf(&s, "%.*s%s", (int)n, k, suffix) < 0)
		return -1;
	l->v[l->n++] = s;
	return 0;
}

static int mb_list(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		   struct tsec_strlist *out, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	char p[TSEC_KEY_MAX + 2];
	size_t plen, cap = 0, i;
	int kind, rc = 0;

	delay(m);
	pthread_rwlock_rdlock(&m->rw);
	kind = kind_of(m, sk);
	if (kind != 2) {
		rc = kind == 1 ? tsec__seterr(err, TSEC_EINVAL, sk->text,
					      "'%s' is a file, not a folder", sk->text)
			       : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
		goto out;
	}
	plen = (size_t)snprintf(p, sizeof(p), "%s%s", sk->text, sk->n ? "/" : "");
	for (i = lower(m, p); i < m->n && !strncmp(m->e[i].key, p, plen); i++) {
		const char *k = m->e[i].key, *slash = strchr(k + plen, '/');
		if (recursive || !slash) {
			rc = add(out, &cap, k, strlen(k), "");
		} else {
			/* One entry per folder: skip the rest of its run. */
			size_t fl = (size_t)(slash - k) + 1;
			rc = add(out, &cap, k, fl - 1, "/");
			while (i + 1 < m->n && !strncmp(m->e[i + 1].key, k, fl))
				i++;
		}
		if (rc) {
			tsec_strlist_free(out);
			rc = tsec__seterr(err, TSEC_ENOMEM, sk->text, "cannot list");
			break;
		}
	}
out:
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

static void drop(struct membe *m, size_t i, size_t count)
{
	for (size_t j = i; j < i + count; j++) {
		free(m->e[j].key);
		free(m->e[j].val);
	}
	if (m->n > i + count)
		memmove(&m->e[i], &m->e[i + count], (m->n - i - count) * sizeof(*m->e));
	m->n -= count;
}

static int mb_del(struct tsec__backend *b, const struct tsec__skey *sk, int recursive,
		  struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	char p[TSEC_KEY_MAX + 2];
	size_t i, j, plen;
	int rc = 0;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	i = lower(m, sk->text);
	if (i < m->n && !strcmp(m->e[i].key, sk->text)) {
		drop(m, i, 1);
	} else if (!has_below(m, sk->text)) {
		rc = tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	} else if (!recursive) {
		rc = tsec__seterr(err, TSEC_EINVAL, sk->text,
				  "'%s' is a folder; delete it recursively", sk->text);
	} else {
		plen = (size_t)snprintf(p, sizeof(p), "%s/", sk->text);
		i = lower(m, p);
		for (j = i; j < m->n && !strncmp(m->e[j].key, p, plen); j++)
			;
		drop(m, i, j - i);
	}
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

/* Why key cannot take a value now, or 0. */
static int refuse_put(const struct membe *m, const struct tsec__skey *sk,
		      struct tsec_error *err)
{
	if (has_below(m, sk->text))
		return tsec__seterr(err, TSEC_EEXIST, sk->text,
				    "'%s' is a folder; a folder is never replaced by a file", sk->text);
	if (parent_is_value(m, sk))
		return tsec__seterr(err, TSEC_EEXIST, sk->text,
				    "a value stands where a folder of '%s' must be", sk->text);
	return 0;
}

/* New copies of a group's keys and values, made before anything changes. */
struct prep {
	char *key;                   /* NULL when the key exists already */
	char *val;
};

static int prepare(struct membe *m, const struct tsec__bput *p, size_t n, struct prep *pr)
{
	if (m->n + n > m->cap) {
		size_t nc = m->cap ? m->cap : 64;
		struct entry *ne;
		while (nc < m->n + n)
			nc *= 2;
		if (!(ne = realloc(m->e, nc * sizeof(*ne))))
			return TSEC_ENOMEM;
		m->e = ne;
		m->cap = nc;
	}
	for (size_t i = 0; i < n; i++) {
		if (!(pr[i].val = malloc(p[i].len ? p[i].len : 1)))
			return TSEC_ENOMEM;
		memcpy(pr[i].val, p[i].value, p[i].len);
		if (!find(m, p[i].sk->text) && !(pr[i].key = strdup(p[i].sk->text)))
			return TSEC_ENOMEM;
	}
	return 0;
}

/* Applies a prepared group; cannot fail. */
static void apply(struct membe *m, const struct tsec__bput *p, size_t n, struct prep *pr)
{
	int64_t t = now_ns();

	for (size_t i = 0; i < n; i++) {
		size_t at = lower(m, p[i].sk->text);
		if (!pr[i].key) {
			free(m->e[at].val);
		} else {
			memmove(&m->e[at + 1], &m->e[at], (m->n - at) * sizeof(*m->e));
			m->n++;
			m->e[at].key = pr[i].key;
		}
		m->e[at].val = pr[i].val;
		m->e[at].len = p[i].len;
		m->e[at].mtime_ns = t;
		pr[i].key = pr[i].val = NULL;
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

static int mb_put_many(struct tsec__backend *b, const struct tsec__bput *p, size_t n,
		       const struct tsec__fence *f, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	struct prep *pr = NULL;
	int rc = 0;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	if (f) {
		struct lease *l = lease_find(m, f->name, false);
		struct tsec__lease_state none;
		memset(&none, 0, sizeof(none));
		if ((rc = tsec__lease_fenced(l ? &l->st : &none, f, tsec__wall_ms(), err)))
			goto out;
	}
	/* Everything is checked and allocated before anything changes. */
	for (size_t i = 0; i < n; i++)
		if ((rc = refuse_put(m, p[i].sk, err)))
			goto out;
	if (!(pr = calloc(n, sizeof(*pr))) || prepare(m, p, n, pr)) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	apply(m, p, n, pr);
out:
	pthread_rwlock_unlock(&m->rw);
	for (size_t i = 0; pr && i < n; i++) {
		free(pr[i].key);
		free(pr[i].val);
	}
	free(pr);
	return rc;
}

static int mb_move(struct tsec__backend *b, const struct tsec__skey *src,
		   const struct tsec__skey *dst, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	struct entry *e;
	size_t i;
	int rc = 0;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	if (!(e = find(m, src->text))) {
		rc = has_below(m, src->text)
			? tsec__seterr(err, TSEC_EINVAL, src->text, "'%s' is a folder; only values move",
				       src->text)
			: tsec__seterr(err, TSEC_ENOENT, src->text, "%s: not found", src->text);
		goto out;
	}
	if (find(m, dst->text) || has_below(m, dst->text)) {
		rc = tsec__seterr(err, TSEC_EEXIST, dst->text, "'%s' exists; move never replaces",
				  dst->text);
		goto out;
	}
	if ((rc = refuse_put(m, dst, err)))
		goto out;
	/* Re-key the entry in place: its value is never under two names. */
	{
		struct entry moved = *e;
		char *k = strdup(dst->text);
		if (!k) {
			rc = tsec__seterr(err, TSEC_ENOMEM, dst->text, NULL);
			goto out;
		}
		i = (size_t)(e - m->e);
		memmove(&m->e[i], &m->e[i + 1], (m->n - i - 1) * sizeof(*m->e));
		m->n--;
		free(moved.key);
		moved.key = k;
		i = lower(m, k);
		memmove(&m->e[i + 1], &m->e[i], (m->n - i) * sizeof(*m->e));
		m->e[i] = moved;
		m->n++;
	}
out:
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

static int mb_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		       const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct membe *m = mb_of(b);
	struct lease *l;
	bool dirty;
	int rc;

	delay(m);
	pthread_rwlock_wrlock(&m->rw);
	if (!(l = lease_find(m, name, true)))
		rc = tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	else if ((rc = tsec__lease_try(&l->st, waiter, ttl_ms, tsec__wall_ms(), out, &dirty)))
		tsec__seterr(err, rc, name, "the lock is held or promised to a waiter");
	pthread_rwlock_unlock(&m->rw);
	return rc;
}

static int owned(struct membe *m, const char *name, const uint8_t token[16], uint64_t ttl_ms,
		 int64_t *expires, struct tsec_error *err)
{
	struct tsec__lease_state none;
	struct lease *l;
	int64_t now = tsec__wall_ms();
	int rc;

	delay(m);
	memset(&none, 0, sizeof(none));
	pthread_rwlock_wrlock(&m->rw);
	l = lease_find(m, name, false);
	if (!(rc = tsec__lease_owned(l ? &l->st : &none, token, now, name, err))) {
		if (ttl_ms)
			*expires = l->st.expires_ms = tsec__deadline_after(now, ttl_ms);
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
	drop(m, 0, m->n);
	free(m->e);
	free(m->locks);
	pthread_rwlock_destroy(&m->rw);
	free(m);
}

static const struct tsec__backend_ops memory_ops = {
	.name = "memory",
	.close = mb_close,
	.get = mb_get,
	.kind = mb_kind,
	.stat = mb_stat,
	.list = mb_list,
	.del = mb_del,
	.move = mb_move,
	.put_many = mb_put_many,
	.lock_try = mb_lock_try,
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
