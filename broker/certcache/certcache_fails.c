/*
 * The certificate cache's failure backoff (certcache_private.h): per
 * name, the failures in a row to obtain a certificate and when the last
 * was, in a hash table of its own, at most `capacity` names, the first
 * recorded dropped first.  Not locked here: the cache's writers' mutex
 * covers every call.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/certcache.h"
#include "broker/certcache/certcache_private.h"
#include "common/error.h"

#define BACKOFF_FIRST_S 60
#define BACKOFF_MAX_S 86400

/* A name's failures in a row. */
struct tsec__fail {
	struct tsec__fail *next;     /* in its bucket */
	struct tsec__fail *older, *newer;  /* first recorded first */
	uint64_t hash;
	unsigned failures;
	int64_t last;
	char name[];
};

int tsec__fails_init(struct tsec__fails *t, size_t nbuckets, size_t capacity)
{
	memset(t, 0, sizeof(*t));
	if (!(t->tab = calloc(nbuckets, sizeof(*t->tab))))
		return TSEC_ENOMEM;
	t->mask = nbuckets - 1;
	t->capacity = capacity;
	return 0;
}

void tsec__fails_fini(struct tsec__fails *t)
{
	while (t->oldest) {
		struct tsec__fail *f = t->oldest;

		t->oldest = f->newer;
		free(f);
	}
	free(t->tab);
	t->tab = NULL;
}

static struct tsec__fail *find(const struct tsec__fails *t, const char *low, size_t n,
			       uint64_t h)
{
	struct tsec__fail *f = t->tab[h & t->mask];

	for (; f; f = f->next)
		if (f->hash == h && !strncmp(f->name, low, n) && f->name[n] == '\0')
			return f;
	return NULL;
}

static void drop(struct tsec__fails *t, struct tsec__fail *f)
{
	struct tsec__fail **pp;

	if (!f)
		return;
	for (pp = &t->tab[f->hash & t->mask]; *pp != f; pp = &(*pp)->next)
		;
	*pp = f->next;
	if (f->older)
		f->older->newer = f->newer;
	else
		t->oldest = f->newer;
	if (f->newer)
		f->newer->older = f->older;
	else
		t->newest = f->older;
	t->n--;
	free(f);
}

static void said(const struct tsec__fail *f, struct tsec_cert_failure *out)
{
	int64_t wait = BACKOFF_MAX_S;

	if (f->failures <= 12)   /* 60 s << 11 is past a day already */
		wait = (int64_t)BACKOFF_FIRST_S << (f->failures - 1);
	if (wait > BACKOFF_MAX_S)
		wait = BACKOFF_MAX_S;
	out->failures = f->failures;
	out->last = f->last;
	out->retry_at = f->last + wait;
}

int tsec__fails_add(struct tsec__fails *t, const char *low, size_t n, uint64_t h, int64_t now,
		    struct tsec_cert_failure *out)
{
	struct tsec__fail *f = find(t, low, n, h);

	if (!f) {
		if (t->n == t->capacity)
			drop(t, t->oldest);      /* bounded: the first recorded goes */
		if (!(f = calloc(1, sizeof(*f) + n + 1)))
			return TSEC_ENOMEM;
		memcpy(f->name, low, n);
		f->hash = h;
		f->next = t->tab[h & t->mask];
		t->tab[h & t->mask] = f;
		f->older = t->newest;
		if (t->newest)
			t->newest->newer = f;
		else
			t->oldest = f;
		t->newest = f;
		t->n++;
	}
	if (f->failures < UINT_MAX)
		f->failures++;
	f->last = now;
	if (out)
		said(f, out);
	return 0;
}

int tsec__fails_get(const struct tsec__fails *t, const char *low, size_t n, uint64_t h,
		    struct tsec_cert_failure *out)
{
	const struct tsec__fail *f = find(t, low, n, h);

	if (!f)
		return TSEC_ENOENT;
	if (out)
		said(f, out);
	return 0;
}

void tsec__fails_drop(struct tsec__fails *t, const char *low, size_t n, uint64_t h)
{
	if (t->n)
		drop(t, find(t, low, n, h));
}
