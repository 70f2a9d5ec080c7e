/*
 * The remote store's sweeper: removes blobs no reference names, once
 * this sweeper has seen each unreferenced for the whole grace period.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/remote_private.h"
#include "broker/storage/backend.h"
#include "common/clock.h"
#include "common/error.h"

/* Bytes of blobs a sweep holds at once to put back what turns out
 * referenced after all. */
#define SWEEP_BATCH_BYTES (16u << 20)

struct tsec__cand {
	char name[TSEC__BLOB_NAME_MAX + 1];
	int64_t since;               /* first seen unreferenced (mono ms) */
	int seen;                    /* in this sweep's listing */
};

void tsec__rsweep_free(struct tsec_remote *r)
{
	free(r->cand);
	r->cand = NULL;
	r->ncand = r->capcand = 0;
}


struct nameset {
	char (*v)[TSEC__BLOB_NAME_MAX + 1];
	size_t n, cap;
};

static int nameset_add(struct nameset *s, const char *name)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		void *nv = realloc(s->v, cap * sizeof(*s->v));
		if (!nv)
			return -1;
		s->v = nv;
		s->cap = cap;
	}
	snprintf(s->v[s->n++], sizeof(s->v[0]), "%s", name);
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

static bool nameset_has(const struct nameset *s, const char *name)
{
	return s->n && bsearch(name, s->v, s->n, sizeof(s->v[0]), cmp_name) != NULL;
}

/* Every blob any reference under certificates/ names, sorted. */
static int referenced(struct tsec_remote *r, struct nameset *out, struct tsec_error *err)
{
	struct tsec__backend *be = r->coord->be;
	struct tsec__skey root;
	struct tsec_strlist l = { 0 };
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = tsec__skey_parse("certificates", false, &root, err)))
		return rc;
	rc = be->ops->list(be, &root, 1, &l, err);
	if (rc == TSEC_ENOENT)
		return 0;
	if (rc)
		return rc;
	for (size_t i = 0; i < l.n && rc == 0; i++) {
		struct tsec__skey sk;
		struct tsec_error e2;
		char name[TSEC__BLOB_NAME_MAX + 1];
		char *t;
		size_t n;

		if (tsec__skey_parse(l.v[i], false, &sk, &e2) ||
		    be->ops->get(be, &sk, TSEC__RREF_MAX, &t, &n, &e2))
			continue;   /* a folder, gone meanwhile, or not ours */
		/* Unverified: a blob anything names is kept (a forged
		 * reference keeps a blob, it never makes one go). */
		if (tsec__ref_blob(t, n, name) == 0 && nameset_add(out, name))
			rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		free(t);
	}
	tsec_strlist_free(&l);
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(out->v[0]), cmp_name);
	return rc;
}

void tsec__rsweep_restore(struct tsec_remote *r, char (*names)[TSEC__BLOB_NAME_MAX + 1],
			  uint8_t **bytes, size_t *lens, size_t n)
{
	struct nameset refd;
	struct tsec_error e2;

	if (referenced(r, &refd, &e2) != 0) {
		/* Cannot tell: put every one back; the next sweep judges. */
		for (size_t i = 0; i < n; i++)
			r->blobs->ops->put_new(r->blobs, names[i], bytes[i], lens[i], &e2);
		free(refd.v);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (nameset_has(&refd, names[i]))
			r->blobs->ops->put_new(r->blobs, names[i], bytes[i], lens[i], &e2);
	free(refd.v);
}

struct sweep_ctx {
	struct tsec_remote *r;
	const struct nameset *refd;
	struct nameset doomed;
	struct tsec_remote_sweep *st;
	int64_t now, grace;
	size_t nsorted;
	int oom;
};

static int cmp_cand(const void *a, const void *b)
{
	return strcmp(((const struct tsec__cand *)a)->name, ((const struct tsec__cand *)b)->name);
}

/* The candidates are kept sorted by name between sweeps (those a sweep
 * adds go after the sorted ones, which is all it looks up). */
static struct tsec__cand *cand_find(struct tsec_remote *r, size_t nsorted, const char *name)
{
	struct tsec__cand key;

	snprintf(key.name, sizeof(key.name), "%s", name);
	return nsorted ? bsearch(&key, r->cand, nsorted, sizeof(*r->cand), cmp_cand) : NULL;
}

static int on_blob(void *ctx, const char *name, int64_t mtime_ms)
{
	struct sweep_ctx *c = ctx;
	struct tsec_remote *r = c->r;
	struct tsec__cand *k;

	(void)mtime_ms;
	c->st->blobs++;
	if (nameset_has(c->refd, name)) {
		c->st->referenced++;
		return 0;
	}
	if (!(k = cand_find(r, c->nsorted, name))) {
		if (r->ncand == r->capcand) {
			size_t cap = r->capcand ? 2 * r->capcand : 64;
			struct tsec__cand *nv = realloc(r->cand, cap * sizeof(*nv));
			if (!nv) {
				c->oom = 1;
				return 0;
			}
			r->cand = nv;
			r->capcand = cap;
		}
		k = &r->cand[r->ncand++];
		snprintf(k->name, sizeof(k->name), "%s", name);
		k->since = c->now;
	}
	k->seen = 1;
	if (c->now - k->since >= c->grace) {
		if (nameset_add(&c->doomed, name))
			c->oom = 1;
	} else {
		c->st->waiting++;
	}
	return 0;
}

/* Removes doomed[from..to), holding their bytes to put back any that a
 * publish made referenced meanwhile. */
static void remove_batch(struct tsec_remote *r, const struct nameset *doomed, size_t from,
			 size_t to, struct tsec_remote_sweep *st)
{
	size_t n = to - from, ng = 0;
	char (*gone)[TSEC__BLOB_NAME_MAX + 1] = calloc(n, sizeof(*gone));
	uint8_t **b = calloc(n, sizeof(*b));
	size_t *l = calloc(n, sizeof(*l));
	struct tsec_error e2;

	if (!gone || !b || !l)
		goto out;
	for (size_t i = from; i < to; i++) {
		if (r->blobs->ops->get(r->blobs, doomed->v[i], r->blob_max + TSEC__RBLOB_HDR + TSEC__RSEAL_OVERHEAD,
				       &b[ng], &l[ng],
				       &e2))
			continue;
		if (r->blobs->ops->del(r->blobs, doomed->v[i], &e2)) {
			free(b[ng]);
			continue;
		}
		memcpy(gone[ng++], doomed->v[i], sizeof(gone[0]));
	}
	if (ng)
		tsec__rsweep_restore(r, gone, b, l, ng);
	for (size_t i = 0; i < ng; i++) {
		struct tsec__cand *k = cand_find(r, r->ncand, gone[i]);
		if (r->blobs->ops->has(r->blobs, gone[i], &e2) == TSEC_ENOENT) {
			st->removed++;
			if (k)
				k->seen = 0;   /* gone: forgotten below */
		}
		sodium_memzero(b[i], l[i]);
		free(b[i]);
	}
out:
	free(gone);
	free(b);
	free(l);
}

int tsec_remote_sweep(struct tsec_remote *r, uint64_t grace_ms, struct tsec_remote_sweep *out,
		      struct tsec_error *err)
{
	struct tsec_remote_sweep st = { 0 };
	struct nameset refd;
	struct sweep_ctx c;
	int rc;

	if (out)
		memset(out, 0, sizeof(*out));
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	pthread_mutex_lock(&r->sweep_mu);
	/* References first, then the blobs: a blob written after the
	 * references were read is new to this sweep, so it waits its grace. */
	if ((rc = referenced(r, &refd, err)))
		goto out;
	c = (struct sweep_ctx){ .r = r, .refd = &refd, .st = &st, .now = tsec__mono_ms(),
				.grace = grace_ms > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)grace_ms };
	for (size_t i = 0; i < r->ncand; i++)
		r->cand[i].seen = 0;
	c.nsorted = r->ncand;
	rc = r->blobs->ops->list(r->blobs, on_blob, &c, err);
	free(refd.v);
	if (rc == 0 && c.oom)
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	if (rc) {
		free(c.doomed.v);
		goto out;
	}
	if (r->ncand > 1)
		qsort(r->cand, r->ncand, sizeof(*r->cand), cmp_cand);
	for (size_t i = 0; i < c.doomed.n;) {
		size_t j = i, bytes = 0;
		while (j < c.doomed.n && (j == i || bytes < SWEEP_BATCH_BYTES)) {
			bytes += r->blob_max;
			j++;
		}
		remove_batch(r, &c.doomed, i, j, &st);
		i = j;
	}
	free(c.doomed.v);
	/* Forget candidates no longer there, referenced again, or removed
	 * (order kept: the list stays sorted). */
	{
		size_t o = 0;
		for (size_t i = 0; i < r->ncand; i++)
			if (r->cand[i].seen)
				r->cand[o++] = r->cand[i];
		r->ncand = o;
	}
out:
	pthread_mutex_unlock(&r->sweep_mu);
	if (out)
		*out = st;
	return rc;
}
