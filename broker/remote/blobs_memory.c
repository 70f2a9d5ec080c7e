/*
 * Blobs in this process's memory: for tests and for the benchmark's
 * local-processing figure.  Every get copies, as a real provider's
 * transfer would.  mtimes read the injected clock.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/blobs.h"
#include "common/clock.h"
#include "common/error.h"

#define NBUCKETS 256

struct mblob {
	struct mblob *next;
	char name[TSEC__BLOB_NAME_MAX + 1];
	int64_t mtime_ms;
	size_t len;
	uint8_t data[];
};

struct mblobs {
	struct tsec__blobs base;
	pthread_mutex_t mu;
	struct mblob *bucket[NBUCKETS];
	char claim[TSEC__STORE_ID_HEX + 1];
};

/* Names end in hex digits of a keyed hash: two of them spread well. */
static struct mblob **slot(struct mblobs *m, const char *name)
{
	size_t n = strlen(name);
	unsigned h = n >= 2 ? ((unsigned)(unsigned char)name[n - 1] * 31u +
			       (unsigned)(unsigned char)name[n - 2] * 7u + (unsigned)name[0])
			    : 0;
	struct mblob **p = &m->bucket[h % NBUCKETS];

	while (*p && strcmp((*p)->name, name))
		p = &(*p)->next;
	return p;
}

static int m_put_new(struct tsec__blobs *b, const char *name, const void *data, size_t len,
		     struct tsec_error *err)
{
	struct mblobs *m = (struct mblobs *)b;
	struct mblob **p, *e;

	if (!tsec__blob_name_ok(name))
		return tsec__seterr(err, TSEC_EKEY, "", "not a blob name");
	pthread_mutex_lock(&m->mu);
	p = slot(m, name);
	if (*p) {
		pthread_mutex_unlock(&m->mu);
		return tsec__seterr(err, TSEC_EEXIST, name, "blob %s exists", name);
	}
	if (!(e = malloc(sizeof(*e) + len))) {
		pthread_mutex_unlock(&m->mu);
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	}
	e->next = NULL;
	memcpy(e->name, name, strlen(name) + 1);
	e->mtime_ms = tsec__wall_ms();
	e->len = len;
	memcpy(e->data, data, len);
	*p = e;
	pthread_mutex_unlock(&m->mu);
	return 0;
}

static int m_has(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	struct mblobs *m = (struct mblobs *)b;
	struct mblob **p;
	int rc = 0;

	if (!tsec__blob_name_ok(name))
		return tsec__seterr(err, TSEC_EKEY, "", "not a blob name");
	pthread_mutex_lock(&m->mu);
	p = slot(m, name);
	if (!*p)
		rc = tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name);
	pthread_mutex_unlock(&m->mu);
	return rc;
}

static int m_get(struct tsec__blobs *b, const char *name, size_t max, uint8_t **out,
		 size_t *len, struct tsec_error *err)
{
	struct mblobs *m = (struct mblobs *)b;
	struct mblob **p;
	int rc = 0;

	*out = NULL;
	*len = 0;
	if (!tsec__blob_name_ok(name))
		return tsec__seterr(err, TSEC_EKEY, "", "not a blob name");
	pthread_mutex_lock(&m->mu);
	p = slot(m, name);
	if (!*p)
		rc = tsec__seterr(err, TSEC_ENOENT, name, "no blob %s", name);
	else if ((*p)->len > max)
		rc = tsec__seterr(err, TSEC_ETOOBIG, name, "blob %s is too large", name);
	else if (!(*out = malloc((*p)->len + 1)))
		rc = tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	if (rc == 0) {
		memcpy(*out, (*p)->data, (*p)->len);
		(*out)[(*p)->len] = 0;
		*len = (*p)->len;
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

static int m_del(struct tsec__blobs *b, const char *name, struct tsec_error *err)
{
	struct mblobs *m = (struct mblobs *)b;
	struct mblob **p, *e;

	if (!tsec__blob_name_ok(name))
		return tsec__seterr(err, TSEC_EKEY, "", "not a blob name");
	pthread_mutex_lock(&m->mu);
	p = slot(m, name);
	if ((e = *p)) {
		*p = e->next;
		free(e);
	}
	pthread_mutex_unlock(&m->mu);
	return 0;
}

/* Calls fn outside the lock, on a copy of the names (fn may delete). */
static int m_list(struct tsec__blobs *b, tsec__blob_list_fn fn, void *ctx,
		  struct tsec_error *err)
{
	struct mblobs *m = (struct mblobs *)b;
	struct item {
		char name[TSEC__BLOB_NAME_MAX + 1];
		int64_t mtime_ms;
	} *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < NBUCKETS && rc == 0; i++)
		for (struct mblob *e = m->bucket[i]; e; e = e->next) {
			if (n == cap) {
				struct item *nv = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof(*v));
				if (!nv) {
					rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
					break;
				}
				v = nv;
			}
			memcpy(v[n].name, e->name, sizeof(e->name));
			v[n++].mtime_ms = e->mtime_ms;
		}
	pthread_mutex_unlock(&m->mu);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = fn(ctx, v[i].name, v[i].mtime_ms);
	free(v);
	return rc;
}

static void m_close(struct tsec__blobs *b)
{
	struct mblobs *m = (struct mblobs *)b;

	for (int i = 0; i < NBUCKETS; i++)
		while (m->bucket[i]) {
			struct mblob *e = m->bucket[i];
			m->bucket[i] = e->next;
			free(e);
		}
	pthread_mutex_destroy(&m->mu);
	free(m);
}

static int m_probe(struct tsec__blobs *b, struct tsec_error *err)
{
	(void)b;
	(void)err;
	return 0;
}

static int m_claim(struct tsec__blobs *b, const char *id, char *holder, size_t n,
		   struct tsec_error *err)
{
	struct mblobs *m = (struct mblobs *)b;

	(void)err;
	pthread_mutex_lock(&m->mu);
	if (!m->claim[0] && id)
		snprintf(m->claim, sizeof(m->claim), "%s", id);
	snprintf(holder, n, "%s", m->claim);
	pthread_mutex_unlock(&m->mu);
	return 0;
}

static const struct tsec__blob_ops memory_ops = {
	"memory", m_put_new, m_has, m_get, m_del, m_list, m_close, m_probe, m_claim, NULL,
};

int tsec__blobs_memory_open(struct tsec__blobs **out, const char *rest,
			    const struct tsec_remote_opts *o, struct tsec_error *err)
{
	struct mblobs *m;

	(void)o;
	*out = NULL;
	if (*rest)
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "memory: takes nothing after it");
	if (!(m = calloc(1, sizeof(*m))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	m->base.ops = &memory_ops;
	pthread_mutex_init(&m->mu, NULL);
	*out = &m->base;
	return 0;
}
