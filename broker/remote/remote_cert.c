/*
 * The remote store's certificate operations: publish, load, presence and
 * archival, over the references and the generation record of each
 * certificate (remote_private.h has the formats).
 *
 * What a load trusts: nothing it reads from the coordinator until it
 * verifies.  Each reference's MAC binds it to the key it sits at; the
 * record (a reserved key no caller can write) names the certificate's
 * current publish and which parts are live, and it changes in the same
 * guarded transaction as the references, so an older set put back (a
 * replay) or a set assembled by hand never matches it.  The record's
 * sequence only rises; this process also remembers the highest it has
 * seen per certificate, so a record that goes back (the coordinator
 * restored from a backup, a redis failover that lost the last write) is
 * refused here, while this process lives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/remote_private.h"
#include "common/error.h"

#define LOAD_TRIES 5

/* ---- a certificate's keys and state ---- */

struct refkeys {
	char text[TSEC__RK][TSEC_KEY_MAX];
	char rec[TSEC_KEY_MAX + 16];
	struct tsec__skey sk[TSEC__RK + 1];  /* the references, then the record */
	struct tsec__rbind bind;
};

static int refkeys_of(const char *issuer, const char *domain, struct refkeys *k,
		      struct tsec_error *err)
{
	size_t folder;
	int rc;

	if (tsec__cert_names(issuer, domain, k->text[0], k->text[1], k->text[2], TSEC_KEY_MAX))
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	for (int i = 0; i < TSEC__RK; i++)
		if ((rc = tsec__skey_parse(k->text[i], false, &k->sk[i], err)))
			return rc;
	/* certificates/<issuer>/<d>: the record's name and the blobs'
	 * certificate are made from it, as the references' are. */
	folder = (size_t)(strrchr(k->text[0], '/') - k->text[0]);
	snprintf(k->rec, sizeof(k->rec), TSEC__RECORDS "/%.*s", (int)folder, k->text[0]);
	k->bind.len = folder - 13;
	memcpy(k->bind.text, k->text[0] + 13, k->bind.len);
	k->bind.text[k->bind.len] = 0;
	return tsec__skey_parse_any(k->rec, &k->sk[TSEC__RK], err);
}

/* What the coordinator holds for a certificate, read as of one moment. */
struct state {
	uint64_t since;              /* hw_epoch when the read began */
	char *t[TSEC__RK + 1];       /* raw texts (NULL: absent); [3] the record */
	size_t n[TSEC__RK + 1];
	struct tsec__ref ref[TSEC__RK];
	struct tsec__rrec rec;
	unsigned live;               /* parts live and verified */
};

static void state_free(struct state *st)
{
	tsec__values_free(st->t, st->n, TSEC__RK + 1);
}

static int read_state(struct tsec_remote *r, const struct refkeys *k, struct state *st,
		      struct tsec_error *err)
{

	memset(st, 0, sizeof(*st));
	st->since = atomic_load(&r->hw_epoch);
	return tsec__store_raw_get_many(r->coord, k->sk, TSEC__RK + 1, TSEC__RREF_MAX, st->t, st->n, err);
}

/* The certificate's reference and record only (presence): as of one
 * moment, as read_state; the key's and metadata's stay absent. */
static int read_crt_state(struct tsec_remote *r, const struct refkeys *k, struct state *st,
			  struct tsec_error *err)
{
	struct tsec__skey two[2];
	char *t[2];
	size_t n[2];
	int rc;

	memset(st, 0, sizeof(*st));
	st->since = atomic_load(&r->hw_epoch);
	two[0] = k->sk[0];
	two[1] = k->sk[TSEC__RK];
	if ((rc = tsec__store_raw_get_many(r->coord, two, 2, TSEC__RREF_MAX, t, n, err)))
		return rc;
	st->t[0] = t[0], st->n[0] = n[0];
	st->t[TSEC__RK] = t[1], st->n[TSEC__RK] = n[1];
	return 0;
}

/*
 * Verifies a state's record (when there is one): its MAC for its key,
 * and a sequence not below one this process has seen (then remembered).
 * 0, or TSEC_ECORRUPT or TSEC_EROLLBACK, counted.
 */
static int verify_record(struct tsec_remote *r, const struct refkeys *k, struct state *st,
			 struct tsec_error *err)
{
	int rc;

	if (!st->t[TSEC__RK])
		return 0;
	if ((rc = tsec__rrec_read(r, st->t[TSEC__RK], st->n[TSEC__RK], k->rec, &st->rec, err)))
		return rc;
	if (tsec__hw_seen(r, k->rec, st->rec.seq, st->since, true)) {
		atomic_fetch_add(&r->n_rollback, 1);
		return tsec__seterr(err, TSEC_EROLLBACK, k->text[0], "the generation record of %s "
				    "went back to sequence %llu, below one this broker has seen (a "
				    "coordinator restored or failed over): refused until it is "
				    "published again", k->bind.text,
				    (unsigned long long)st->rec.seq);
	}
	return 0;
}

/*
 * Verifies the references the (verified) record names live, against it;
 * st->live and *present say which are there.  0, or TSEC_ECORRUPT (one
 * does not verify where it sits, or there is no record) or
 * TSEC_EROLLBACK (an older set, or one assembled from several), counted.
 */
static int verify_refs(struct tsec_remote *r, const struct refkeys *k, struct state *st,
		       int *present, struct tsec_error *err)
{
	int rc;

	*present = 0;
	st->live = 0;
	if (!st->t[TSEC__RK]) {
		/* Say why the first reference is not ours, if it is not. */
		for (int i = 0; i < TSEC__RK; i++) {
			if (!st->t[i])
				continue;
			if ((rc = tsec__ref_read(r, st->t[i], st->n[i], i, k->text[i], &st->ref[i],
						 err)))
				return rc;
			atomic_fetch_add(&r->n_refused, 1);
			return tsec__seterr(err, TSEC_ECORRUPT, k->text[i], "the references of %s "
					    "have no generation record: not written by this store's "
					    "publish (by hand, or restored in part); refused",
					    k->bind.text);
		}
		return 0;
	}
	for (int i = 0; i < TSEC__RK; i++) {
		if (!(st->rec.parts & (1u << i)) || !st->t[i])
			continue;    /* not live (an archived key): never served */
		if ((rc = tsec__ref_read(r, st->t[i], st->n[i], i, k->text[i], &st->ref[i], err)))
			return rc;
		if (st->ref[i].gen != st->rec.gen || strcmp(st->ref[i].id, st->rec.id)) {
			atomic_fetch_add(&r->n_rollback, 1);
			return tsec__seterr(err, TSEC_EROLLBACK, k->text[i], "%s is of generation "
					    "%llu; %s is at generation %llu (an older set put back, "
					    "or one assembled from several): refused", k->text[i],
					    (unsigned long long)st->ref[i].gen, k->bind.text,
					    (unsigned long long)st->rec.gen);
		}
		st->live |= 1u << i;
		(*present)++;
	}
	return 0;
}

static int verify_state(struct tsec_remote *r, const struct refkeys *k, struct state *st,
			int *present, struct tsec_error *err)
{
	int rc = verify_record(r, k, st, err);

	*present = 0;
	return rc ? rc : verify_refs(r, k, st, present, err);
}

static int check_as(struct tsec_remote *r, const struct tsec_principal *who,
		    const char *action, const struct refkeys *k, size_t n,
		    struct tsec_error *err)
{
	struct tsec_request q[TSEC__RK];

	for (size_t i = 0; i < n; i++)
		tsec__req_for(&q[i], action, &k->sk[i]);
	return tsec__store_check(r->coord, who, q, n, err);
}

/* ---- load, presence ---- */

/* Fetches the three blobs st names: 0, 1 when one is gone (switched
 * and swept since the references were read: read them again), or an
 * error; on anything but 0, f holds nothing. */
static int fetch_all(struct tsec_remote *r, const struct refkeys *k, const struct state *st,
		     struct tsec_cert_files *f, struct tsec_error *err)
{
	char **bufs[TSEC__RK] = { &f->cert, &f->key, &f->meta };
	size_t *lens[TSEC__RK] = { &f->cert_len, &f->key_len, &f->meta_len };
	int rc = 0;

	for (int i = 0; i < TSEC__RK && !rc; i++) {
		rc = tsec__rblob_fetch(r, st->ref[i].blob, &k->bind, bufs[i], lens[i], err);
		if (rc == TSEC_ENOENT)
			rc = 1;
		else if (rc == 0 && *lens[i] != st->ref[i].size)
			rc = tsec__seterr(err, TSEC_ECORRUPT, st->ref[i].blob, "blob %s is %zu "
					  "bytes, its reference says %llu", st->ref[i].blob,
					  *lens[i], (unsigned long long)st->ref[i].size);
	}
	if (rc)
		tsec_cert_files_free(f);
	return rc;
}

int tsec_remote_load(struct tsec_remote *r, const struct tsec_principal *who,
		     const char *issuer, const char *domain, struct tsec_cert_files *f,
		     struct tsec_error *err)
{
	struct refkeys k;
	int rc = 0;

	if (!r || !f)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	memset(f, 0, sizeof(*f));
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = check_as(r, who, "cert.load", &k, TSEC__RK, err)))
		return rc;
	for (int attempt = 0; attempt < LOAD_TRIES; attempt++) {
		struct state st;
		int present;

		if ((rc = read_state(r, &k, &st, err)))
			return rc;
		if ((rc = verify_state(r, &k, &st, &present, err)) == 0) {
			if (present == 0)
				rc = tsec__seterr(err, TSEC_ENOENT, k.text[0], "no certificate for "
						  "%s", domain);
			else if (present < TSEC__RK)
				rc = tsec__seterr(err, TSEC_EINCOMPLETE, k.text[0], "only %d of the "
						  "certificate's 3 references are live", present);
			else
				rc = fetch_all(r, &k, &st, f, err);
		}
		state_free(&st);
		if (rc != 1)
			return rc;
	}
	return tsec__seterr(err, TSEC_ECORRUPT, k.text[0], "a blob of %s is missing from the "
			    "object store", domain);
}

int tsec_remote_exists(struct tsec_remote *r, const struct tsec_principal *who,
		       const char *issuer, const char *domain, int *exists,
		       struct tsec_error *err)
{
	struct refkeys k;
	struct state st;
	int rc, present;

	*exists = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = check_as(r, who, "cert.exists", &k, 1, err)) ||
	    (rc = read_crt_state(r, &k, &st, err)))
		return rc;
	/* Exact: the certificate's reference, verified and live, and its
	 * record saying all three are (an archived key: a fetch would fail,
	 * so it does not exist whole; issue 51, item 15: exists said it did
	 * and the fetch after it failed). */
	if ((rc = verify_state(r, &k, &st, &present, err)) == 0)
		*exists = (st.live & 1u) && st.rec.parts == TSEC__PARTS_ALL;
	state_free(&st);
	return rc;
}

/* ---- publish ---- */

static bool same_blobs(const struct state *st, char names[TSEC__RK][TSEC__BLOB_NAME_MAX + 1])
{
	if (st->live != TSEC__PARTS_ALL)
		return false;
	for (int i = 0; i < TSEC__RK; i++)
		if (strcmp(st->ref[i].blob, names[i]))
			return false;
	return true;
}

/* Whether the coordinator's current set is exactly these blobs, verified
 * (errors read as "no"). */
static bool current_is(struct tsec_remote *r, const struct refkeys *k,
		       char names[TSEC__RK][TSEC__BLOB_NAME_MAX + 1])
{
	struct tsec_error e2;
	struct state st;
	int present;
	bool yes;

	if (read_state(r, k, &st, &e2))
		return false;
	yes = verify_state(r, k, &st, &present, &e2) == 0 && same_blobs(&st, names);
	state_free(&st);
	return yes;
}

/*
 * What a publish checks before anything changes: each part within
 * blob_max, what it would keep to undo itself within txn_max, and the
 * policy, asked on the logical keys and judging the content.
 */
static int publish_allowed(struct tsec_remote *r, const struct tsec_principal *who,
			   struct refkeys *k, const char *domain, const void *const data[TSEC__RK],
			   const size_t len[TSEC__RK], struct tsec_error *err)
{
	struct tsec_request q[TSEC__RK];
	size_t total = 0;

	for (int i = 0; i < TSEC__RK; i++) {
		if (len[i] > r->blob_max)
			return tsec__seterr(err, TSEC_ETOOBIG, k->text[i], "%s is %zu bytes (at "
					    "most %zu)", k->text[i], len[i], r->blob_max);
		total += TSEC__RBLOB_HDR + len[i] + TSEC__RSEAL_OVERHEAD + TSEC__RREF_MAX;
	}
	if (total > r->txn_max)
		return tsec__seterr(err, TSEC_ETOOBIG, k->text[0], "publishing %s would keep %zu "
				    "bytes to undo itself (txn_max %zu)", domain, total, r->txn_max);
	for (int i = 0; i < TSEC__RK; i++) {
		tsec__req_for(&q[i], "cert.publish", &k->sk[i]);
		q[i].ctx.has = TSEC_CTX_SIZE;
		q[i].ctx.size = len[i];
		if (i == 0 && len[0]) {
			q[0].ctx.has |= TSEC_CTX_CERT_PEM;
			q[0].ctx.cert_pem.ptr = data[0];
			q[0].ctx.cert_pem.len = len[0];
		}
	}
	return tsec__store_check(r->coord, who, q, TSEC__RK, err);
}

/*
 * The switch: three references naming the blobs and the next record
 * (*next, made here), in one coordinator transaction, applied only over
 * the record st holds (TSEC_ECHANGED when another publish switched
 * first).  refs[] and *rectext are the caller's to free.
 */
static int publish_switch(struct tsec_remote *r, const struct tsec_principal *who,
			  const struct tsec_lock *lk, const struct refkeys *k,
			  const struct state *st, char names[TSEC__RK][TSEC__BLOB_NAME_MAX + 1],
			  const size_t len[TSEC__RK], struct tsec__rrec *next,
			  char *refs[TSEC__RK], char **rectext, struct tsec_error *err)
{
	struct tsec_put puts[TSEC__RK];
	struct tsec__guarded rec;
	uint8_t rnd[TSEC__RID_HEX / 2];
	/* Past the highest this process has seen, too: a record removed
	 * by hand starts no second run of sequences that this process, and
	 * any that saw the first, would refuse after one publish. */
	uint64_t base = st->t[TSEC__RK] ? st->rec.seq : 0, seen = tsec__hw_get(r, k->rec);

	*next = (struct tsec__rrec){ .seq = (base > seen ? base : seen) + 1,
				     .parts = TSEC__PARTS_ALL };
	next->gen = next->seq;
	randombytes_buf(rnd, sizeof(rnd));
	sodium_bin2hex(next->id, sizeof(next->id), rnd, sizeof(rnd));
	for (int i = 0; i < TSEC__RK; i++) {
		struct tsec__ref ref = { .gen = next->gen, .size = len[i] };

		memcpy(ref.id, next->id, sizeof(ref.id));
		memcpy(ref.blob, names[i], sizeof(ref.blob));
		snprintf(ref.by, sizeof(ref.by), "%.*s", who && who->id.ptr ? (int)who->id.len : 0,
			 who && who->id.ptr ? who->id.ptr : "");
		if (!(refs[i] = tsec__ref_text(r, k->text[i], &ref)))
			return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		puts[i] = (struct tsec_put){ k->text[i], refs[i], strlen(refs[i]) };
	}
	if (!(*rectext = tsec__rrec_text(r, k->rec, next)))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	rec = (struct tsec__guarded){ k->rec, *rectext, strlen(*rectext), st->t[TSEC__RK],
				      st->n[TSEC__RK] };
	/* The policy was asked before, about the certificate. */
	return tsec__store_put_checked(r->coord, lk, puts, TSEC__RK, &rec, err);
}

/*
 * What is there now, read for a publish.  References that do not verify
 * (forged, format 1, an older set put back) are written over (st->live
 * cleared); a record that does not verify, or that went back, is not:
 * that needs an operator.
 */
static int read_now(struct tsec_remote *r, const struct refkeys *k, struct state *st,
		    struct tsec_error *err)
{
	struct tsec_error e2;
	int rc, present;

	if ((rc = read_state(r, k, st, err)) || (rc = verify_record(r, k, st, err)))
		return rc;
	if (verify_refs(r, k, st, &present, &e2))
		st->live = 0;
	return 0;
}

/* Compensation for a publish that failed: the blobs it made go again,
 * and any that a concurrent publish of the same content relies on comes
 * back. */
static void publish_undo(struct tsec_remote *r, char names[TSEC__RK][TSEC__BLOB_NAME_MAX + 1],
			 const bool made[TSEC__RK], uint8_t *const enc[TSEC__RK],
			 const size_t enclen[TSEC__RK])
{
	char gone[TSEC__RK][TSEC__BLOB_NAME_MAX + 1];
	uint8_t *gb[TSEC__RK];
	size_t gl[TSEC__RK], ng = 0;
	struct tsec_error e2;

	for (int i = 0; i < TSEC__RK; i++)
		if (made[i] && r->blobs->ops->del(r->blobs, names[i], &e2) == 0) {
			memcpy(gone[ng], names[i], sizeof(gone[ng]));
			gb[ng] = enc[i];
			gl[ng++] = enclen[i];
		}
	if (ng)
		tsec__rsweep_restore(r, gone, gb, gl, ng);
}

/* One publish's working set: the blobs' names and sealed bytes, which
 * it made, the references and record it wrote. */
struct publish {
	struct refkeys k;
	struct state st;
	const void *data[TSEC__RK];
	size_t len[TSEC__RK], enclen[TSEC__RK];
	char names[TSEC__RK][TSEC__BLOB_NAME_MAX + 1];
	uint8_t *enc[TSEC__RK];
	char *refs[TSEC__RK], *rectext;
	bool made[TSEC__RK];
};

static void publish_free(struct publish *p)
{
	state_free(&p->st);
	for (int i = 0; i < TSEC__RK; i++) {
		if (p->enc[i])
			sodium_memzero(p->enc[i], p->enclen[i]);
		free(p->enc[i]);
		free(p->refs[i]);
	}
	free(p->rectext);
}

/* Every blob written where absent (one there already must be this
 * content, or is replaced): 0 or the error. */
static int publish_blobs(struct tsec_remote *r, struct publish *p, struct tsec_error *err)
{
	int rc;

	for (int i = 0; i < TSEC__RK; i++)
		if ((rc = tsec__rblob_ensure(r, p->names[i], p->enc[i], p->enclen[i], &p->made[i],
					     err)))
			return rc;
	return 0;
}

/*
 * The blobs, then the switch of the references to them.  Another publish
 * that switched first is no conflict when it published the same content
 * (*unchanged set); other content is TSEC_ECHANGED.  On an error the
 * blobs this publish made go again (publish_undo).
 */
static int publish_new(struct tsec_remote *r, const struct tsec_principal *who,
		       const struct tsec_lock *lk, const char *domain, struct publish *p,
		       bool *unchanged, struct tsec_error *err)
{
	struct tsec__rrec next;
	int rc;

	if ((rc = publish_blobs(r, p, err)))
		goto undo;
	if (tsec__remote_after_blobs_hook)
		tsec__remote_after_blobs_hook();
	rc = publish_switch(r, who, lk, &p->k, &p->st, p->names, p->len, &next, p->refs,
			    &p->rectext, err);
	if (rc == TSEC_ECHANGED && current_is(r, &p->k, p->names)) {
		*unchanged = true;
		return 0;
	}
	if (rc == TSEC_ECHANGED) {
		atomic_fetch_add(&r->n_conflict, 1);
		rc = tsec__seterr(err, TSEC_ECHANGED, p->k.text[0], "another publish of %s landed "
				  "first: load it, and publish again if yours is still wanted (a "
				  "renewal lock held around the publish avoids this)", domain);
	}
	if (rc)
		goto undo;
	tsec__hw_seen(r, p->k.rec, next.seq, UINT64_MAX, true);
	/* A sweeper that judged a blob unreferenced before the switch may
	 * have removed it since: put back any that is gone. */
	for (int i = 0; i < TSEC__RK; i++) {
		struct tsec_error e2;
		if (r->blobs->ops->has(r->blobs, p->names[i], &e2) == TSEC_ENOENT)
			r->blobs->ops->put_new(r->blobs, p->names[i], p->enc[i], p->enclen[i], &e2);
	}
	return 0;
undo:
	publish_undo(r, p->names, p->made, p->enc, p->enclen);
	return rc;
}

int tsec_remote_publish(struct tsec_remote *r, const struct tsec_principal *who,
			const struct tsec_lock *lk, const char *issuer, const char *domain,
			const struct tsec_cert_files *f, enum tsec_remote_outcome *outcome,
			struct tsec_error *err)
{
	struct publish p;
	bool unchanged = false;
	int rc;

	memset(&p, 0, sizeof(p));
	if (outcome)
		*outcome = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if (!f || !f->cert || !f->key || !f->meta)
		return tsec__seterr(err, TSEC_EINVAL, "", "a certificate needs its cert, key and "
				    "metadata");
	p.data[0] = f->cert, p.len[0] = f->cert_len;
	p.data[1] = f->key, p.len[1] = f->key_len;
	p.data[2] = f->meta, p.len[2] = f->meta_len;
	if ((rc = refkeys_of(issuer, domain, &p.k, err)) ||
	    (rc = publish_allowed(r, who, &p.k, domain, p.data, p.len, err)) ||
	    (rc = tsec__remote_claim(r, false, err)))
		return rc;
	for (int i = 0; i < TSEC__RK; i++)
		tsec__rblob_address(r, i, &p.k.bind, p.data[i], p.len[i], p.names[i]);
	for (int i = 0; i < TSEC__RK; i++)
		if ((rc = tsec__rblob_encode(r, i, &p.k.bind, p.names[i], p.data[i], p.len[i],
					     &p.enc[i], &p.enclen[i], err)))
			goto out;
	if ((rc = read_now(r, &p.k, &p.st, err)))
		goto out;
	/* Current: every blob is made whole again (one lost from the object
	 * store, or altered there, is written anew).  Else published. */
	if (same_blobs(&p.st, p.names)) {
		unchanged = true;
		rc = publish_blobs(r, &p, err);
	} else {
		rc = publish_new(r, who, lk, domain, &p, &unchanged, err);
	}
	if (!rc && outcome)
		*outcome = unchanged ? TSEC_REMOTE_UNCHANGED : TSEC_REMOTE_PUBLISHED;
out:
	publish_free(&p);
	return rc;
}

/* ---- archival ---- */

static int archive_key_of(const struct refkeys *k, const char *name, char *out, size_t n,
			  struct tsec_error *err)
{
	const char *slash = strrchr(k->text[1], '/');
	size_t folder = (size_t)(slash - k->text[1]);

	if (!name || !*name || strlen(name) > 64 || strchr(name, '/'))
		return tsec__seterr(err, TSEC_EKEY, "name", "an archive name is one segment of "
				    "at most 64 characters");
	if ((size_t)snprintf(out, n, "%.*s/archive/%s.key", (int)folder, k->text[1], name) >= n)
		return tsec__seterr(err, TSEC_EKEY, "name", "archive name too long");
	return 0;
}

int tsec_remote_archive_key(struct tsec_remote *r, const struct tsec_principal *who,
			    const struct tsec_lock *lk, const char *issuer, const char *domain,
			    const char *name, struct tsec_error *err)
{
	struct refkeys k;
	struct state st;
	struct tsec_request q;
	struct tsec__skey dsk;
	struct tsec__rrec next;
	struct tsec__ref ref;
	char dst[TSEC_KEY_MAX], *reftext = NULL, *rectext = NULL;
	int rc, present, kind = 0;

	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = archive_key_of(&k, name, dst, sizeof(dst), err)) ||
	    (rc = tsec__skey_parse(dst, false, &dsk, err)))
		return rc;
	tsec__req_for(&q, "cert.archive", &k.sk[1]);
	q.ctx.has = TSEC_CTX_DEST;
	q.ctx.dest.ptr = dsk.text;
	q.ctx.dest.len = dsk.tlen;
	if ((rc = tsec__store_check(r->coord, who, &q, 1, err)) ||
	    (rc = read_state(r, &k, &st, err)))
		return rc;
	if ((rc = verify_state(r, &k, &st, &present, err)))
		goto out;
	if (!(st.live & 2u)) {
		rc = tsec__seterr(err, TSEC_ENOENT, k.text[1], "%s has no live key to archive",
				  domain);
		goto out;
	}
	if ((rc = tsec__store_raw_kind(r->coord, &dsk, &kind, err)))
		goto out;
	if (kind) {
		rc = tsec__seterr(err, TSEC_EEXIST, dst, "%s is taken", dst);
		goto out;
	}
	/*
	 * The key's reference, written again for where it goes (its MAC
	 * binds the place), and the record no longer listing the key, in one
	 * transaction over the record read.  The live key's reference stays
	 * where it is: the record says it is not live, so it is never served,
	 * and removing it after the switch could remove a newer publish's.
	 */
	ref = st.ref[1];
	next = st.rec;
	next.seq++;
	next.parts &= ~2u;
	if (!(reftext = tsec__ref_text(r, dst, &ref)) ||
	    !(rectext = tsec__rrec_text(r, k.rec, &next))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	{
		struct tsec_put put = { dst, reftext, strlen(reftext) };
		struct tsec__guarded rec = { k.rec, rectext, strlen(rectext), st.t[TSEC__RK],
					     st.n[TSEC__RK] };
		rc = tsec__store_put_checked(r->coord, lk, &put, 1, &rec, err);
	}
	if (rc == TSEC_ECHANGED)
		rc = tsec__seterr(err, TSEC_ECHANGED, k.text[1], "%s changed while its key was "
				  "archived: nothing archived; look again", domain);
	if (rc == 0)
		tsec__hw_seen(r, k.rec, next.seq, UINT64_MAX, true);
out:
	state_free(&st);
	free(reftext);
	free(rectext);
	return rc;
}

int tsec_remote_load_archived(struct tsec_remote *r, const struct tsec_principal *who,
			      const char *issuer, const char *domain, const char *name,
			      char **out, size_t *len, struct tsec_error *err)
{
	struct refkeys k;
	struct tsec__ref ref;
	struct tsec__skey dsk;
	struct tsec_request q;
	char dst[TSEC_KEY_MAX], *t = NULL;
	size_t n;
	int rc;

	*out = NULL;
	*len = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = archive_key_of(&k, name, dst, sizeof(dst), err)) ||
	    (rc = tsec__skey_parse(dst, false, &dsk, err)))
		return rc;
	tsec__req_for(&q, "cert.load", &dsk);
	if ((rc = tsec__store_check(r->coord, who, &q, 1, err)))
		return rc;
	rc = tsec__store_raw_get(r->coord, &dsk, TSEC__RREF_MAX, &t, &n, err);
	if (rc == TSEC_ENOENT)
		return tsec__seterr(err, TSEC_ENOENT, dst, "no key archived as %s", name);
	if (rc)
		return rc;
	rc = tsec__ref_read(r, t, n, 1, dst, &ref, err);
	free(t);
	if (rc)
		return rc;
	if (!who || who->id.len != strlen(ref.by) || memcmp(who->id.ptr, ref.by, who->id.len))
		return tsec__seterr(err, TSEC_EDENIED, dst, "an archived key is only for the "
				    "principal that published it");
	return tsec__rblob_fetch(r, ref.blob, &k.bind, out, len, err);
}

/* ---- accepting a restore ---- */

int tsec_remote_recover(struct tsec_remote *r, const char *issuer, const char *domain,
			uint64_t *was, uint64_t *now, struct tsec_error *err)
{
	struct refkeys k;
	struct state st;
	struct tsec__rrec next;
	struct tsec__guarded rec;
	char *rectext = NULL;
	uint64_t seen;
	int rc, present;

	*was = *now = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if ((rc = refkeys_of(issuer, domain, &k, err)) || (rc = read_state(r, &k, &st, err)))
		return rc;
	if (!st.t[TSEC__RK]) {
		rc = tsec__seterr(err, TSEC_ENOENT, k.text[0], "%s has no generation record: "
				  "nothing to recover (publish it)", k.bind.text);
		goto out;
	}
	/* Authentic, and naming references that are there and match it:
	 * the restored state is one this store wrote, only older.  What
	 * this process has seen is not asked: that is what is accepted. */
	if ((rc = tsec__rrec_read(r, st.t[TSEC__RK], st.n[TSEC__RK], k.rec, &st.rec, err)) ||
	    (rc = verify_refs(r, &k, &st, &present, err)))
		goto out;
	seen = tsec__hw_get(r, k.rec);
	next = st.rec;
	next.seq = (st.rec.seq > seen ? st.rec.seq : seen) + TSEC_REMOTE_RECOVER_GAP;
	if (!(rectext = tsec__rrec_text(r, k.rec, &next))) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	rec = (struct tsec__guarded){ k.rec, rectext, strlen(rectext), st.t[TSEC__RK],
				      st.n[TSEC__RK] };
	if ((rc = tsec__store_put_checked(r->coord, NULL, NULL, 0, &rec, err)))
		goto out;
	tsec__hw_seen(r, k.rec, next.seq, UINT64_MAX, true);
	*was = st.rec.seq;
	*now = next.seq;
out:
	free(rectext);
	state_free(&st);
	return rc;
}
