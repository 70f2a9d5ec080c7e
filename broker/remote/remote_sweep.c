/*
 * The remote store's sweeper: removes blobs no reference names, once
 * sweeps have seen each unreferenced for the whole grace period.
 *
 * When a blob was first seen unreferenced is kept in the coordinator,
 * one key a blob under .tsec-remote/sweep/, named "<kind>.<hex>.<unix
 * ms>" (the time in the name: one listing reads them all), so the grace
 * holds across sweeps from any broker of the fleet and across restarts.
 * Two sweepers at once may each note a blob: the earliest time counts.
 * The grace is judged by the sweeper's wall clock, so the clocks of the
 * brokers that sweep must agree to well within the grace.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/remote_private.h"
#include "common/clock.h"
#include "common/error.h"

#define SWEEP_DIR TSEC__RECORDS "/sweep"
/* Bytes of blobs a sweep holds at once to put back what turns out
 * referenced after all. */
#define SWEEP_BATCH_BYTES (16u << 20)
/* Candidates noted per coordinator transaction. */
#define NOTE_BATCH 8

struct tsec__cand {
	char name[TSEC__BLOB_NAME_MAX + 1];
	int64_t since;               /* first seen unreferenced (wall ms) */
	bool noted;                  /* its key is in the coordinator */
	bool listed;                 /* in this sweep's listing, unreferenced */
	bool gone;                   /* removed by this sweep */
	int dup;                     /* a later key of the same blob */
};

struct nameset {
	char (*v)[TSEC__BLOB_NAME_MAX + 1];
	size_t n, cap;
};

void tsec__rsweep_free(struct tsec_remote *r)
{
	(void)r;
}

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
	struct tsec__skey root;
	struct tsec_strlist l = { 0 };
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = tsec__skey_parse("certificates", false, &root, err)))
		return rc;
	rc = tsec__store_raw_list(r->coord, &root, 1, &l, err);
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
		    tsec__store_raw_get(r->coord, &sk, TSEC__RREF_MAX, &t, &n, &e2))
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

/* ---- the candidates, kept in the coordinator ---- */

struct cands {
	struct tsec__cand *v;
	size_t n, cap;
};

static struct tsec__cand *cand_add(struct cands *c)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		void *nv = realloc(c->v, cap * sizeof(*c->v));
		if (!nv)
			return NULL;
		c->v = nv;
		c->cap = cap;
	}
	memset(&c->v[c->n], 0, sizeof(c->v[0]));
	return &c->v[c->n++];
}

static int cmp_cand(const void *a, const void *b)
{
	const struct tsec__cand *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : x->since < y->since ? -1 : x->since > y->since;
}

static struct tsec__cand *cand_find(const struct cands *c, size_t sorted, const char *name)
{
	size_t lo = 0, hi = sorted;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int d = strcmp(c->v[mid].name, name);
		if (d == 0) {
			while (mid > 0 && !strcmp(c->v[mid - 1].name, name))
				mid--;
			return &c->v[mid];
		}
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The candidate's key, "<SWEEP_DIR>/<kind>.<hex>.<since>". */
static void cand_key(const struct tsec__cand *c, char *out, size_t n)
{
	char flat[TSEC__BLOB_NAME_MAX + 1];
	char *slash;

	snprintf(flat, sizeof(flat), "%s", c->name);
	if ((slash = strchr(flat, '/')))
		*slash = '.';
	snprintf(out, n, SWEEP_DIR "/%s.%lld", flat, (long long)c->since);
}

/* Reads the candidates noted by earlier sweeps (sorted; a blob noted
 * twice keeps its earliest time, the later keys marked dup). */
static int cands_load(struct tsec_remote *r, struct cands *c, struct tsec_error *err)
{
	struct tsec__skey dir;
	struct tsec_strlist l = { 0 };
	int rc;

	if ((rc = tsec__skey_parse_any(SWEEP_DIR, &dir, err)))
		return rc;
	rc = tsec__store_raw_list(r->coord, &dir, 0, &l, err);
	if (rc == TSEC_ENOENT)
		return 0;
	if (rc)
		return rc;
	for (size_t i = 0; i < l.n && rc == 0; i++) {
		const char *leaf = strrchr(l.v[i], '/');
		char name[TSEC__BLOB_NAME_MAX + 1], *dot;
		long long since;
		struct tsec__cand *k;

		leaf = leaf ? leaf + 1 : l.v[i];
		/* <kind>.<64 hex>.<ms> */
		if (strlen(leaf) > TSEC__BLOB_NAME_MAX + 21)
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(strrchr(leaf, '.') - leaf), leaf);
		if (!(dot = strchr(name, '.')))
			continue;
		*dot = '/';
		if (!tsec__blob_name_ok(name) ||
		    sscanf(strrchr(leaf, '.') + 1, "%lld", &since) != 1 || since < 0)
			continue;   /* not a sweeper's key: left alone */
		if (!(k = cand_add(c))) {
			rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
			break;
		}
		snprintf(k->name, sizeof(k->name), "%s", name);
		k->since = since;
		k->noted = true;
	}
	tsec_strlist_free(&l);
	if (c->n > 1)
		qsort(c->v, c->n, sizeof(c->v[0]), cmp_cand);
	for (size_t i = 1; i < c->n; i++)
		if (!strcmp(c->v[i].name, c->v[i - 1].name))
			c->v[i].dup = 1;
	return rc;
}

/* Notes the candidates added by this sweep, a few keys a transaction;
 * a failure only means the next sweep starts their grace again. */
static void cands_note(struct tsec_remote *r, struct cands *c, size_t from)
{

	for (size_t i = from; i < c->n;) {
		struct tsec__skey sk[NOTE_BATCH];
		struct tsec__bput p[NOTE_BATCH];
		struct tsec__cand *which[NOTE_BATCH];
		struct tsec_error e2;
		size_t m = 0;

		for (; i < c->n && m < NOTE_BATCH; i++) {
			char key[TSEC_KEY_MAX];
			if (!c->v[i].listed)
				continue;
			cand_key(&c->v[i], key, sizeof(key));
			if (tsec__skey_parse_any(key, &sk[m], &e2))
				continue;
			p[m] = (struct tsec__bput){ &sk[m], "1", 1 };
			which[m++] = &c->v[i];
		}
		if (m && tsec__store_raw_put_many(r->coord, p, m, &e2) == 0)
			for (size_t j = 0; j < m; j++)
				which[j]->noted = true;
	}
}

/* Forgets what no longer waits: blobs referenced again, gone, removed. */
static void cands_forget(struct tsec_remote *r, const struct cands *c)
{

	for (size_t i = 0; i < c->n; i++) {
		const struct tsec__cand *k = &c->v[i];
		struct tsec__skey sk;
		struct tsec_error e2;
		char key[TSEC_KEY_MAX];

		if (!k->noted || (k->listed && !k->gone && !k->dup))
			continue;
		cand_key(k, key, sizeof(key));
		if (!tsec__skey_parse_any(key, &sk, &e2))
			tsec__store_raw_del(r->coord, &sk, &e2);
	}
}

/* ---- the sweep ---- */

struct sweep_ctx {
	struct tsec_remote *r;
	const struct nameset *refd;
	struct cands *c;
	struct nameset doomed;
	struct tsec_remote_sweep *st;
	int64_t now, grace;
	size_t nsorted;
	int oom;
};

static int on_blob(void *ctx, const char *name, int64_t mtime_ms)
{
	struct sweep_ctx *x = ctx;
	struct tsec__cand *k;

	(void)mtime_ms;
	x->st->blobs++;
	if (nameset_has(x->refd, name)) {
		x->st->referenced++;
		return 0;
	}
	if (!(k = cand_find(x->c, x->nsorted, name))) {
		if (!(k = cand_add(x->c))) {
			x->oom = 1;
			return 0;
		}
		snprintf(k->name, sizeof(k->name), "%s", name);
		k->since = x->now;
	}
	k->listed = true;
	/* A time ahead of this clock (another sweeper's, or this one gone
	 * back) counts as now: the grace only ever waits longer. */
	if (k->since <= x->now && x->now - k->since >= x->grace) {
		if (nameset_add(&x->doomed, name))
			x->oom = 1;
	} else {
		x->st->waiting++;
	}
	return 0;
}

/*
 * Removes doomed[from..to), holding their bytes to put back any that a
 * publish made referenced meanwhile.  Counts removed and failed; the
 * first failure's error into *first (when its code is 0).
 */
static void remove_batch(struct tsec_remote *r, struct sweep_ctx *x, size_t from, size_t to,
			 struct tsec_error *first)
{
	size_t n = to - from, ng = 0;
	char (*gone)[TSEC__BLOB_NAME_MAX + 1] = calloc(n, sizeof(*gone));
	uint8_t **b = calloc(n, sizeof(*b));
	size_t *l = calloc(n, sizeof(*l));
	struct tsec_error e2;

	if (!gone || !b || !l)
		goto out;
	for (size_t i = from; i < to; i++) {
		int rc = r->blobs->ops->get(r->blobs, x->doomed.v[i],
					    r->blob_max + TSEC__RBLOB_HDR + TSEC__RSEAL_OVERHEAD,
					    &b[ng], &l[ng], &e2);
		if (rc == TSEC_ENOENT)
			continue;   /* gone already */
		if (rc == 0 && (rc = r->blobs->ops->del(r->blobs, x->doomed.v[i], &e2)))
			free(b[ng]);
		if (rc) {
			x->st->failed++;
			if (!first->code)
				*first = e2;
			continue;
		}
		memcpy(gone[ng++], x->doomed.v[i], sizeof(gone[0]));
	}
	if (ng)
		tsec__rsweep_restore(r, gone, b, l, ng);
	for (size_t i = 0; i < ng; i++) {
		struct tsec__cand *k = cand_find(x->c, x->c->n, gone[i]);
		if (r->blobs->ops->has(r->blobs, gone[i], &e2) == TSEC_ENOENT) {
			x->st->removed++;
			for (; k && k < x->c->v + x->c->n && !strcmp(k->name, gone[i]); k++)
				k->gone = true;
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
	struct tsec_error first = { 0 };
	struct cands c = { 0 };
	struct nameset refd = { 0 };
	struct sweep_ctx x;
	size_t loaded;
	int rc;

	if (out)
		memset(out, 0, sizeof(*out));
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	pthread_mutex_lock(&r->sweep_mu);
	/* Only this coordinator's blob store; the references first, then
	 * the blobs: a blob written after the references were read is new
	 * to this sweep, so it waits its grace. */
	if ((rc = tsec__remote_claim(r, true, err)) || (rc = referenced(r, &refd, err)) ||
	    (rc = cands_load(r, &c, err)))
		goto out;
	loaded = c.n;
	x = (struct sweep_ctx){ .r = r, .refd = &refd, .c = &c, .st = &st,
				.now = tsec__wall_ms(), .nsorted = loaded,
				.grace = grace_ms > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)grace_ms };
	rc = r->blobs->ops->list(r->blobs, on_blob, &x, err);
	if (rc == 0 && x.oom)
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	if (rc) {
		free(x.doomed.v);
		goto out;
	}
	cands_note(r, &c, loaded);
	if (c.n > 1)
		qsort(c.v, c.n, sizeof(c.v[0]), cmp_cand);
	for (size_t i = 0; i < x.doomed.n;) {
		size_t j = i, bytes = 0;
		while (j < x.doomed.n && (j == i || bytes < SWEEP_BATCH_BYTES)) {
			bytes += r->blob_max;
			j++;
		}
		remove_batch(r, &x, i, j, &first);
		i = j;
	}
	free(x.doomed.v);
	cands_forget(r, &c);
	/* And what publishers killed mid-write left. */
	if (r->blobs->ops->litter) {
		struct tsec_error e2;
		r->blobs->ops->litter(r->blobs, &st.litter, &e2);
	}
	if (st.failed)
		rc = tsec__seterr(err, TSEC_EIO, first.where, "removed %zu blobs; %zu due could not "
				  "be removed: %s", st.removed, st.failed, first.msg);
out:
	pthread_mutex_unlock(&r->sweep_mu);
	free(refd.v);
	free(c.v);
	if (out)
		*out = st;
	return rc;
}
