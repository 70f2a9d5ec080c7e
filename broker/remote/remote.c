/*
 * The remote certificate store (include/tinysecurity/remote.h): opening
 * and closing it, the blob providers' registry and the statistics.  The
 * formats are in remote_private.h; publish, load, presence and archival
 * in remote_cert.c; the sweeper in remote_sweep.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/remote_private.h"
#include "common/opts.h"
#include "common/secret.h"
#include "common/error.h"

void (*tsec__remote_after_blobs_hook)(void);

struct tsec__blobs *tsec__remote_blobs(struct tsec_remote *r)
{
	return r->blobs;
}

/* The providers, listed once: what o->blobs starts with, and how the
 * rest of it opens one. */
static const struct provider {
	const char *scheme;
	int (*open)(struct tsec__blobs **out, const char *rest, const struct tsec_remote_opts *o,
		    struct tsec_error *err);
} providers[] = {
	{ "file:", tsec__blobs_file_open },
	{ "s3://", tsec__blobs_s3_open },
	{ "memory:", tsec__blobs_memory_open },
};

#define NPROVIDERS (sizeof(providers) / sizeof(providers[0]))
#define KNOWN "file:/path, s3://bucket/prefix or memory:"

size_t tsec__blobs_schemes(const char **out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < NPROVIDERS && n < max; i++)
		out[n++] = providers[i].scheme;
	return n;
}

int tsec__blobs_open(struct tsec__blobs **out, const struct tsec_remote_opts *o,
		     struct tsec_error *err)
{
	const char *w = o->blobs;

	*out = NULL;
	if (!w || !*w)
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "no blob store named (" KNOWN ")");
	for (size_t i = 0; i < NPROVIDERS; i++) {
		size_t n = strlen(providers[i].scheme);
		if (!strncmp(w, providers[i].scheme, n))
			return providers[i].open(out, w + n, o, err);
	}
	return tsec__seterr(err, TSEC_EINVAL, "blobs", "unknown blob store '%.60s' (" KNOWN ")", w);
}

int tsec_remote_open(struct tsec_remote **out, struct tsec_store *coordinator,
		     const struct tsec_remote_opts *o, struct tsec_error *err)
{
	struct tsec_remote_opts mine;
	struct tsec_remote *r;
	uint8_t master[TSEC__KEY32];
	int rc;

	*out = NULL;
	if (!coordinator || !o)
		return tsec__seterr(err, TSEC_EINVAL, "", "a remote store needs a coordinator and "
				    "options");
	/* The caller's struct by its size: what its header had (types.h). */
	if ((rc = tsec__opts_take(&mine, sizeof(mine), TSEC_REMOTE_OPTS_MIN_SIZE, o,
				  "remote options", err)))
		return rc;
	o = &mine;
	if (sodium_init() < 0)
		return tsec__seterr(err, TSEC_EIO, "", "libsodium did not start");
	if (!o->key_file)
		return tsec__seterr(err, TSEC_EINVAL, "key_file", "a remote store needs key_file "
				    "(without it a blob's address would be a plain hash of a "
				    "private key, and references could not be authenticated)");
	if (!(r = calloc(1, sizeof(*r))))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	pthread_mutex_init(&r->sweep_mu, NULL);
	pthread_mutex_init(&r->hw_mu, NULL);
	pthread_mutex_init(&r->claim_mu, NULL);
	/* The blob store first: its folder (file:) is fenced, so a key
	 * file inside it is refused below (common/trust.c). */
	if ((rc = tsec__blobs_open(&r->blobs, o, err)) ||
	    (rc = tsec__key32_load(o->key_file, master, err))) {
		tsec_remote_close(&r);
		return rc;
	}
	crypto_kdf_derive_from_key(r->k_addr, sizeof(r->k_addr), 1, "tsecblob", master);
	crypto_kdf_derive_from_key(r->k_seal, sizeof(r->k_seal), 2, "tsecblob", master);
	crypto_kdf_derive_from_key(r->k_nonce, sizeof(r->k_nonce), 3, "tsecblob", master);
	crypto_kdf_derive_from_key(r->k_ref, sizeof(r->k_ref), 4, "tsecblob", master);
	crypto_generichash_init(&r->st_addr, r->k_addr, sizeof(r->k_addr), 32);
	crypto_generichash_init(&r->st_nonce, r->k_nonce, sizeof(r->k_nonce),
				crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
	crypto_generichash_init(&r->st_ref, r->k_ref, sizeof(r->k_ref), 32);
	sodium_memzero(master, sizeof(master));
	r->coord = coordinator;
	r->seal_keys = !o->plain_keys;
	r->blob_max = o->blob_max ? o->blob_max : TSEC_REMOTE_BLOB_MAX;
	r->txn_max = o->txn_max ? o->txn_max : 4 * r->blob_max;
	snprintf(r->where, sizeof(r->where), "%s", o->blobs ? o->blobs : "");
	*out = r;
	return 0;
}

void tsec_remote_close(struct tsec_remote **pr)
{
	struct tsec_remote *r;

	if (!pr || !*pr)
		return;
	r = *pr;
	if (r->blobs)
		r->blobs->ops->close(r->blobs);
	tsec__rsweep_free(r);
	free(r->hw);
	pthread_mutex_destroy(&r->sweep_mu);
	pthread_mutex_destroy(&r->hw_mu);
	pthread_mutex_destroy(&r->claim_mu);
	sodium_memzero(r, sizeof(*r));
	free(r);
	*pr = NULL;
}

int tsec_remote_probe(struct tsec_remote *r, struct tsec_error *err)
{
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	return r->blobs->ops->probe(r->blobs, err);
}

#define STORE_ID TSEC__RECORDS "/store-id"

/* The coordinator's id, made (guarded: one wins) the first time. */
static int store_id(struct tsec_remote *r, char id[TSEC__STORE_ID_HEX + 1],
		    struct tsec_error *err)
{
	struct tsec__skey sk;
	int rc;

	if ((rc = tsec__skey_parse_any(STORE_ID, &sk, err)))
		return rc;
	for (int tries = 0; tries < 3; tries++) {
		uint8_t rnd[TSEC__STORE_ID_HEX / 2];
		char mine[TSEC__STORE_ID_HEX + 1], *v = NULL;
		struct tsec__guarded rec = { STORE_ID, mine, TSEC__STORE_ID_HEX, NULL, 0 };
		size_t n;

		rc = tsec__store_raw_get(r->coord, &sk, 256, &v, &n, err);
		if (rc == 0) {
			rc = n == TSEC__STORE_ID_HEX ? 0 : tsec__seterr(err, TSEC_ECORRUPT, STORE_ID,
					"the coordinator's store id is malformed");
			if (!rc)
				memcpy(id, v, n + 1);
			free(v);
			return rc;
		}
		if (rc != TSEC_ENOENT)
			return rc;
		randombytes_buf(rnd, sizeof(rnd));
		sodium_bin2hex(mine, sizeof(mine), rnd, sizeof(rnd));
		rc = tsec__store_put_checked(r->coord, NULL, NULL, 0, &rec, err);
		if (rc == 0) {
			memcpy(id, mine, sizeof(mine));
			return 0;
		}
		if (rc != TSEC_ECHANGED)
			return rc;
	}
	return tsec__seterr(err, TSEC_EBUSY, STORE_ID, "the coordinator's store id kept changing");
}

/*
 * The coordinator's record that it claimed the blob store r->where:
 * records/blob-claim-<32 hex of the place's hash>, made before the claim.
 */
static void claim_record_key(const struct tsec_remote *r, char *key, size_t n)
{
	uint8_t h[16];
	char hex[33];

	crypto_generichash(h, sizeof(h), (const uint8_t *)r->where, strlen(r->where), NULL, 0);
	sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
	snprintf(key, n, TSEC__RECORDS "/blob-claim-%s", hex);
}

/*
 * What the record holds: a MAC (with the reference key, which callers
 * never hold) over the place and this coordinator's store id, so that a
 * record written by anything but this store (by hand into the
 * coordinator, or copied from another store's) never lets a removed
 * claim be made again over another coordinator's blobs.
 */
static void claim_record_text(const struct tsec_remote *r, const char *id, char out[65])
{
	static const uint8_t head[] = "tsec-blob-claim";
	crypto_generichash_state st;
	uint8_t h[32];

	crypto_generichash_init(&st, r->k_ref, sizeof(r->k_ref), sizeof(h));
	crypto_generichash_update(&st, head, sizeof(head));
	crypto_generichash_update(&st, (const uint8_t *)r->where, strlen(r->where) + 1);
	crypto_generichash_update(&st, (const uint8_t *)id, strlen(id));
	crypto_generichash_final(&st, h, sizeof(h));
	sodium_bin2hex(out, 65, h, sizeof(h));
}

/* Whether the coordinator holds this store's record of claiming it
 * (one that does not verify is none). */
static int claim_recorded(struct tsec_remote *r, const char *id, bool *yes,
			  struct tsec_error *err)
{
	struct tsec__skey sk;
	char key[128], want[65], *v = NULL;
	size_t n;
	int rc;

	claim_record_key(r, key, sizeof(key));
	if ((rc = tsec__skey_parse_any(key, &sk, err)))
		return rc;
	rc = tsec__store_raw_get(r->coord, &sk, 256, &v, &n, err);
	claim_record_text(r, id, want);
	*yes = rc == 0 && n == 64 && !sodium_memcmp(v, want, 64);
	free(v);
	return rc == TSEC_ENOENT ? 0 : rc;
}

static int claim_record(struct tsec_remote *r, const char *id, struct tsec_error *err)
{
	char key[128], text[65];
	struct tsec__guarded rec = { key, text, 64, NULL, 0 };
	int rc;

	claim_record_key(r, key, sizeof(key));
	claim_record_text(r, id, text);
	rc = tsec__store_put_checked(r->coord, NULL, NULL, 0, &rec, err);
	return rc == TSEC_ECHANGED ? 0 : rc;   /* made meanwhile: as good */
}

static int one_is_enough(void *ctx, const char *name, int64_t mtime_ms)
{
	(void)name;
	(void)mtime_ms;
	*(bool *)ctx = true;
	return 1;
}

/* The claim, under claim_mu. */
static int claim_locked(struct tsec_remote *r, struct tsec_error *err)
{
	char id[TSEC__STORE_ID_HEX + 1], holder[TSEC__STORE_ID_HEX + 2] = "";
	bool recorded = false, any = false;
	int rc;

	if ((rc = store_id(r, id, err)) ||
	    (rc = r->blobs->ops->claim(r->blobs, NULL, holder, sizeof(holder), err)))
		return rc;
	if (!*holder) {
		/* No claim.  Ours before (our coordinator says so): made
		 * again.  Never ours: taken only where no blob is, for blobs
		 * without a claim may be another coordinator's whose claim
		 * was removed, and a sweep here would remove them. */
		if ((rc = claim_recorded(r, id, &recorded, err)))
			return rc;
		if (!recorded) {
			rc = r->blobs->ops->list(r->blobs, one_is_enough, &any, err);
			if (rc < 0)
				return rc;
			if (any)
				return tsec__seterr(err, TSEC_EINVAL, "blobs", "the blob store %s holds "
						    "blobs but no claim, and this coordinator (store "
						    "id %s) never claimed it: they may be another "
						    "coordinator's whose claim was removed; refused "
						    "(if they are this coordinator's, put the claim "
						    "back: docs/remote.md)", r->where, id);
			if ((rc = claim_record(r, id, err)))
				return rc;
		}
		if ((rc = r->blobs->ops->claim(r->blobs, id, holder, sizeof(holder), err)))
			return rc;
	}
	if (strcmp(holder, id))
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "the blob store %s belongs to another "
				    "coordinator (store id %.32s; this coordinator's is %s): the "
				    "sweeps of two coordinators would remove each other's live "
				    "blobs; give each its own folder or prefix", r->where, holder, id);
	/* Claimed by an older version, without a record: recorded now, so
	 * a removed claim is put back, not refused. */
	if (!recorded && (rc = claim_recorded(r, id, &recorded, err)) == 0 && !recorded)
		rc = claim_record(r, id, err);
	return rc;
}

int tsec__remote_claim(struct tsec_remote *r, bool again, struct tsec_error *err)
{
	int rc;

	if (!again && atomic_load(&r->claimed))
		return 0;
	/* Once per store, not once per publisher racing to be first. */
	pthread_mutex_lock(&r->claim_mu);
	if (!again && atomic_load(&r->claimed))
		rc = 0;
	else
		rc = claim_locked(r, err);
	atomic_store(&r->claimed, rc == 0);
	pthread_mutex_unlock(&r->claim_mu);
	return rc;
}

void tsec_remote_stats(struct tsec_remote *r, struct tsec_remote_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!r)
		return;
	out->refused = atomic_load(&r->n_refused);
	out->rollbacks = atomic_load(&r->n_rollback);
	out->corrupt = atomic_load(&r->n_corrupt);
	out->repaired = atomic_load(&r->n_repaired);
	out->conflicts = atomic_load(&r->n_conflict);
}
