/*
 * The remote certificate store (include/tinysecurity/remote.h): blobs in
 * an object store, three references in the coordinator.
 *
 * Formats (TSEC_REMOTE_FORMAT 1; tests/data/remote-v1 holds a fixture
 * every later version must load):
 *
 *   blob name  <kind>/<hex>, kind crt, key or meta; hex the keyed
 *              BLAKE2b-256 of "<kind>\0" and the plaintext, keyed with
 *              the address key.
 *   blob       "TSB1", one flag byte, then
 *                flag 0: the plaintext;
 *                flag 1: a 24-byte nonce and the plaintext sealed with
 *                XChaCha20-Poly1305 under the sealing key, the blob name
 *                as associated data.  The nonce is a keyed hash of the
 *                plaintext (a third key), so sealing is deterministic:
 *                the same key always makes the same blob bytes.
 *   reference  {"tsec_ref":1,"gen":"<32 hex>","blob":"<name>","size":N,
 *              "by":"<principal>"}: gen is one publish's random id, the
 *              same in its three references, which is how a reader tells
 *              a torn set (read across another publish) from a whole one;
 *              by is who published it (who alone may load the key once
 *              it is archived).
 *
 * The three keys come from the key file with crypto_kdf (context
 * "tsecblob", ids 1 address, 2 seal, 3 nonce).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "broker/remote/blobs.h"
#include "broker/remote/remote_private.h"
#include "broker/storage/backend.h"
#include "broker/storage/remote.h"
#include "broker/storage/store_private.h"
#include "common/clock.h"
#include "common/error.h"

#define NKINDS 3
#define GEN_HEX 32
#define LOAD_TRIES 5
#define REF_MAX 1024
#define BY_MAX 256               /* a publishing principal's id */
#define BLOB_HDR 5
#define SEAL_OVERHEAD (crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + \
		       crypto_aead_xchacha20poly1305_ietf_ABYTES)
/* Bytes of blobs a sweep holds at once to put back what turns out
 * referenced after all. */
#define SWEEP_BATCH_BYTES (16u << 20)

static const char *const kind_name[NKINDS] = { "crt", "key", "meta" };

struct cand {
	char name[TSEC__BLOB_NAME_MAX + 1];
	int64_t since;               /* first seen unreferenced (mono ms) */
	int seen;                    /* in this sweep's listing */
};

struct tsec_remote {
	struct tsec_store *coord;
	struct tsec__blobs *blobs;
	uint8_t k_addr[32], k_seal[32], k_nonce[32];
	bool seal_keys;
	size_t blob_max, txn_max;
	pthread_mutex_t sweep_mu;
	struct cand *cand;
	size_t ncand, capcand;
};

void (*tsec__remote_after_blobs_hook)(void);

struct tsec__blobs *tsec__remote_blobs(struct tsec_remote *r)
{
	return r->blobs;
}

int tsec__blob_name_ok(const char *name)
{
	const char *hex = NULL;

	for (int i = 0; i < NKINDS; i++) {
		size_t n = strlen(kind_name[i]);
		if (!strncmp(name, kind_name[i], n) && name[n] == '/')
			hex = name + n + 1;
	}
	if (!hex || strlen(hex) != 64)
		return 0;
	for (; *hex; hex++)
		if (!((*hex >= '0' && *hex <= '9') || (*hex >= 'a' && *hex <= 'f')))
			return 0;
	return 1;
}

int tsec__blobs_open(struct tsec__blobs **out, const struct tsec_remote_opts *o,
		     struct tsec_error *err)
{
	const char *w = o->blobs;

	*out = NULL;
	if (!w || !*w)
		return tsec__seterr(err, TSEC_EINVAL, "blobs", "no blob store named (file:/path, "
				    "s3://bucket/prefix or memory:)");
	if (!strncmp(w, "file:", 5))
		return tsec__blobs_file_open(out, w + 5, err);
	if (!strncmp(w, "s3://", 5))
		return tsec__blobs_s3_open(out, w + 5, o, err);
	if (!strcmp(w, "memory:"))
		return tsec__blobs_memory_open(out, err);
	return tsec__seterr(err, TSEC_EINVAL, "blobs", "unknown blob store '%.60s' (file:/path, "
			    "s3://bucket/prefix or memory:)", w);
}

int tsec_remote_open(struct tsec_remote **out, struct tsec_store *coordinator,
		     const struct tsec_remote_opts *o, struct tsec_error *err)
{
	struct tsec_remote *r;
	struct tsec__seal master;
	int rc;

	*out = NULL;
	if (!coordinator || !o)
		return tsec__seterr(err, TSEC_EINVAL, "", "a remote store needs a coordinator and "
				    "options");
	if (sodium_init() < 0)
		return tsec__seterr(err, TSEC_EIO, "", "libsodium did not start");
	if (!o->key_file)
		return tsec__seterr(err, TSEC_EINVAL, "key_file", "a remote store needs key_file "
				    "(without it a blob's address would be a plain hash of a "
				    "private key)");
	if ((rc = tsec__seal_load(&master, o->key_file, err)))
		return rc;
	if (!(r = calloc(1, sizeof(*r)))) {
		sodium_memzero(&master, sizeof(master));
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	crypto_kdf_derive_from_key(r->k_addr, sizeof(r->k_addr), 1, "tsecblob", master.key);
	crypto_kdf_derive_from_key(r->k_seal, sizeof(r->k_seal), 2, "tsecblob", master.key);
	crypto_kdf_derive_from_key(r->k_nonce, sizeof(r->k_nonce), 3, "tsecblob", master.key);
	sodium_memzero(&master, sizeof(master));
	r->coord = coordinator;
	r->seal_keys = !o->plain_keys;
	r->blob_max = o->blob_max ? o->blob_max : TSEC_REMOTE_BLOB_MAX;
	r->txn_max = o->txn_max ? o->txn_max : 4 * r->blob_max;
	pthread_mutex_init(&r->sweep_mu, NULL);
	if ((rc = tsec__blobs_open(&r->blobs, o, err))) {
		tsec_remote_close(&r);
		return rc;
	}
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
	free(r->cand);
	pthread_mutex_destroy(&r->sweep_mu);
	sodium_memzero(r, sizeof(*r));
	free(r);
	*pr = NULL;
}

/* ---- blobs ---- */

static void address(const struct tsec_remote *r, int kind, const void *data, size_t len,
		    char name[TSEC__BLOB_NAME_MAX + 1])
{
	crypto_generichash_state st;
	uint8_t h[32];
	size_t kl = strlen(kind_name[kind]);

	crypto_generichash_init(&st, r->k_addr, sizeof(r->k_addr), sizeof(h));
	crypto_generichash_update(&st, (const uint8_t *)kind_name[kind], kl + 1);
	crypto_generichash_update(&st, data, len);
	crypto_generichash_final(&st, h, sizeof(h));
	memcpy(name, kind_name[kind], kl);
	name[kl] = '/';
	sodium_bin2hex(name + kl + 1, 65, h, sizeof(h));
}

/* The blob's bytes for plaintext data of kind (sealed for a key). */
static int encode(const struct tsec_remote *r, int kind, const char *name, const void *data,
		  size_t len, uint8_t **out, size_t *outlen, struct tsec_error *err)
{
	bool seal = kind == 1 && r->seal_keys;
	size_t n = BLOB_HDR + len + (seal ? SEAL_OVERHEAD : 0);
	uint8_t *b = malloc(n);

	if (!b)
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	memcpy(b, "TSB1", 4);
	b[4] = seal ? 1 : 0;
	if (seal) {
		uint8_t *nonce = b + BLOB_HDR;
		crypto_generichash_state st;
		unsigned long long clen;

		crypto_generichash_init(&st, r->k_nonce, sizeof(r->k_nonce),
					crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
		crypto_generichash_update(&st, (const uint8_t *)name, strlen(name));
		crypto_generichash_update(&st, data, len);
		crypto_generichash_final(&st, nonce, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
		crypto_aead_xchacha20poly1305_ietf_encrypt(
			nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, &clen, data, len,
			(const uint8_t *)name, strlen(name), NULL, nonce, r->k_seal);
	} else {
		memcpy(b + BLOB_HDR, data, len);
	}
	*out = b;
	*outlen = n;
	return 0;
}

/*
 * The plaintext of blob b (of name) into a new NUL-terminated buffer,
 * verified against the name: TSEC_ECORRUPT when it does not open or does
 * not hash to its address.
 */
static int decode(const struct tsec_remote *r, const char *name, const uint8_t *b, size_t n,
		  char **out, size_t *outlen, struct tsec_error *err)
{
	char again[TSEC__BLOB_NAME_MAX + 1];
	int kind = -1;
	size_t plen;
	char *p;

	*out = NULL;
	for (int i = 0; i < NKINDS; i++)
		if (!strncmp(name, kind_name[i], strlen(kind_name[i])) &&
		    name[strlen(kind_name[i])] == '/')
			kind = i;
	if (kind < 0 || n < BLOB_HDR || memcmp(b, "TSB1", 4) || b[4] > 1 ||
	    (b[4] == 1 && n < BLOB_HDR + SEAL_OVERHEAD))
		return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s is not a tinysecurity blob "
				    "of format 1", name);
	plen = b[4] ? n - BLOB_HDR - SEAL_OVERHEAD : n - BLOB_HDR;
	if (!(p = malloc(plen + 1)))
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	if (b[4]) {
		const uint8_t *nonce = b + BLOB_HDR;
		unsigned long long got;
		if (crypto_aead_xchacha20poly1305_ietf_decrypt(
			    (uint8_t *)p, &got, NULL,
			    nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
			    n - BLOB_HDR - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
			    (const uint8_t *)name, strlen(name), nonce, r->k_seal) != 0) {
			free(p);
			return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s does not open with "
					    "this store's key (altered, or another key)", name);
		}
	} else {
		memcpy(p, b + BLOB_HDR, plen);
	}
	p[plen] = 0;
	address(r, kind, p, plen, again);
	if (sodium_memcmp(again, name, strlen(name) + 1) != 0) {
		sodium_memzero(p, plen);
		free(p);
		return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s does not match its address "
				    "(altered, or written with another key)", name);
	}
	*out = p;
	*outlen = plen;
	return 0;
}

/* Fetches and verifies one blob. */
static int fetch(struct tsec_remote *r, const char *name, char **out, size_t *len,
		 struct tsec_error *err)
{
	uint8_t *b;
	size_t n;
	int rc = r->blobs->ops->get(r->blobs, name, r->blob_max + BLOB_HDR + SEAL_OVERHEAD, &b,
				    &n, err);

	if (rc)
		return rc;
	rc = decode(r, name, b, n, out, len, err);
	sodium_memzero(b, n);
	free(b);
	return rc;
}

/* ---- references ---- */

struct ref {
	char gen[GEN_HEX + 1];
	char blob[TSEC__BLOB_NAME_MAX + 1];
	uint64_t size;
	char by[BY_MAX + 1];
};

static bool hex_run(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return true;
}

/*
 * A reference exactly as ref_text writes it, read without a tree (a
 * jansson parse was a quarter of a Load): 1 when read, 0 when the text
 * has any other shape (then jansson reads it, any valid JSON layout).
 */
static int parse_ref_fast(const char *t, size_t len, int kind, struct ref *out)
{
	static const char p1[] = "{\"tsec_ref\":1,\"gen\":\"", p2[] = "\",\"blob\":\"",
			  p3[] = "\",\"size\":", p4[] = ",\"by\":\"";
	const char *e = t + len, *p = t;
	size_t kl = strlen(kind_name[kind]);
	uint64_t size = 0;
	int digits = 0;

#define TAKE(lit) (((size_t)(e - p) >= sizeof(lit) - 1 && !memcmp(p, lit, sizeof(lit) - 1)) \
		   ? (p += sizeof(lit) - 1, 1) : 0)
	if (!TAKE(p1) || e - p < GEN_HEX || !hex_run(p, GEN_HEX))
		return 0;
	memcpy(out->gen, p, GEN_HEX);
	out->gen[GEN_HEX] = 0;
	p += GEN_HEX;
	if (!TAKE(p2) || (size_t)(e - p) < kl + 1 + 64 || memcmp(p, kind_name[kind], kl) ||
	    p[kl] != '/' || !hex_run(p + kl + 1, 64))
		return 0;
	memcpy(out->blob, p, kl + 65);
	out->blob[kl + 65] = 0;
	p += kl + 65;
	if (!TAKE(p3))
		return 0;
	while (p < e && *p >= '0' && *p <= '9' && digits < 15) {
		size = size * 10 + (uint64_t)(*p++ - '0');
		digits++;
	}
	if (!digits || (digits > 1 && p[-digits] == '0') || !TAKE(p4))
		return 0;
	{
		const char *q = memchr(p, '"', (size_t)(e - p));
		if (!q || (size_t)(q - p) > BY_MAX || e - q != 2 || q[1] != '}')
			return 0;
		for (const char *c = p; c < q; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x80 || *c == '\\')
				return 0;
		memcpy(out->by, p, (size_t)(q - p));
		out->by[q - p] = 0;
	}
#undef TAKE
	out->size = size;
	return 1;
}

static int parse_ref(const char *text, size_t len, int kind, struct ref *out,
		     const char *key, struct tsec_error *err)
{
	json_error_t je;
	json_t *j, *v;
	const char *gen, *blob, *by;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (parse_ref_fast(text, len, kind, out))
		return 0;
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);

	if (!j || !json_is_object(j)) {
		json_decref(j);
		return tsec__seterr(err, TSEC_ECORRUPT, key, "%s is not a remote-store reference",
				    key);
	}
	v = json_object_get(j, "tsec_ref");
	if (!json_is_integer(v) || json_integer_value(v) != TSEC_REMOTE_FORMAT) {
		rc = tsec__seterr(err, TSEC_ECORRUPT, key, json_is_integer(v) &&
				  json_integer_value(v) > TSEC_REMOTE_FORMAT
				  ? "%s was written by a later version (format %lld)"
				  : "%s is not a remote-store reference", key,
				  (long long)json_integer_value(v));
		goto out;
	}
	gen = json_string_value(json_object_get(j, "gen"));
	blob = json_string_value(json_object_get(j, "blob"));
	by = json_string_value(json_object_get(j, "by"));
	v = json_object_get(j, "size");
	if (!gen || strlen(gen) != GEN_HEX || !blob || !tsec__blob_name_ok(blob) ||
	    strncmp(blob, kind_name[kind], strlen(kind_name[kind])) ||
	    blob[strlen(kind_name[kind])] != '/' || !json_is_integer(v) ||
	    json_integer_value(v) < 0 || !by || strlen(by) > BY_MAX) {
		rc = tsec__seterr(err, TSEC_ECORRUPT, key, "%s: a malformed reference", key);
		goto out;
	}
	memcpy(out->gen, gen, GEN_HEX + 1);
	memcpy(out->blob, blob, strlen(blob) + 1);
	memcpy(out->by, by, strlen(by) + 1);
	out->size = (uint64_t)json_integer_value(v);
out:
	json_decref(j);
	return rc;
}

int tsec__remote_ref_agree(const char *text, size_t len)
{
	for (int kind = 0; kind < NKINDS; kind++) {
		struct ref fast, slow;
		struct tsec_error err;
		char *copy;
		int rc;

		memset(&fast, 0, sizeof(fast));
		if (!parse_ref_fast(text, len, kind, &fast))
			continue;
		/* jansson must read the same reference from the same bytes: a
		 * copy with one space after the brace takes its path. */
		if (!(copy = malloc(len + 1)))
			return -1;
		copy[0] = '{';
		copy[1] = ' ';
		memcpy(copy + 2, text + 1, len - 1);
		rc = parse_ref(copy, len + 1, kind, &slow, "fuzz", &err);
		free(copy);
		if (rc || strcmp(fast.gen, slow.gen) || strcmp(fast.blob, slow.blob) ||
		    strcmp(fast.by, slow.by) || fast.size != slow.size)
			return -1;
	}
	return 0;
}

static char *ref_text(const char *gen, const char *blob, size_t size,
		      const struct tsec_principal *who)
{
	json_t *j = json_pack("{s:i, s:s, s:s, s:I, s:s%}", "tsec_ref", TSEC_REMOTE_FORMAT,
			      "gen", gen, "blob", blob, "size", (json_int_t)size, "by",
			      who && who->id.ptr ? who->id.ptr : "", who ? (size_t)who->id.len : 0);
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	return t;
}

/* The three reference keys of a certificate, parsed. */
struct refkeys {
	char text[NKINDS][TSEC_KEY_MAX];
	struct tsec__skey sk[NKINDS];
};

static int refkeys_of(const char *issuer, const char *domain, struct refkeys *k,
		      struct tsec_error *err)
{
	int rc;

	if (tsec__cert_names(issuer, domain, k->text[0], k->text[1], k->text[2], TSEC_KEY_MAX))
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	for (int i = 0; i < NKINDS; i++)
		if ((rc = tsec__skey_parse(k->text[i], false, &k->sk[i], err)))
			return rc;
	return 0;
}

/*
 * Reads the three references (no policy asked: the caller has).  *present
 * counts those there; refs[i].blob[0] is 0 for one absent.
 */
static int read_refs(struct tsec_remote *r, const struct refkeys *k, struct ref refs[NKINDS],
		     int *present, struct tsec_error *err)
{
	struct tsec__backend *be = r->coord->be;
	char *t[NKINDS];
	size_t n[NKINDS];
	int rc;

	*present = 0;
	for (int i = 0; i < NKINDS; i++)
		memset(&refs[i], 0, sizeof(refs[i]));
	/* As of one moment: a publish (one group) lands before or after. */
	if ((rc = be->ops->get_many(be, k->sk, NKINDS, REF_MAX, t, n, err)))
		return rc;
	for (int i = 0; i < NKINDS && !rc; i++) {
		if (!t[i])
			continue;
		if (!(rc = parse_ref(t[i], n[i], i, &refs[i], k->text[i], err)))
			(*present)++;
	}
	tsec__values_free(t, n, NKINDS);
	return rc;
}

static int check_as(struct tsec_remote *r, const struct tsec_principal *who,
		    const char *action, const struct refkeys *k, size_t n,
		    struct tsec_error *err)
{
	struct tsec_request q[NKINDS];

	for (size_t i = 0; i < n; i++)
		tsec__req_for(&q[i], action, &k->sk[i]);
	return tsec__store_check(r->coord, who, q, n, err);
}

/* ---- load, presence ---- */

int tsec_remote_load(struct tsec_remote *r, const struct tsec_principal *who,
		     const char *issuer, const char *domain, struct tsec_cert_files *f,
		     struct tsec_error *err)
{
	struct refkeys k;
	struct ref refs[NKINDS];
	char **bufs[NKINDS] = { &f->cert, &f->key, &f->meta };
	size_t *lens[NKINDS] = { &f->cert_len, &f->key_len, &f->meta_len };
	int present, rc;

	if (!r || !f)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	memset(f, 0, sizeof(*f));
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = check_as(r, who, "storage.load", &k, NKINDS, err)))
		return rc;
	for (int attempt = 0; attempt < LOAD_TRIES; attempt++) {
		int torn = 0, gone = 0;

		if ((rc = read_refs(r, &k, refs, &present, err)))
			return rc;
		if (present == 0)
			return tsec__seterr(err, TSEC_ENOENT, k.text[0], "no certificate for %s",
					    domain);
		if (present < NKINDS)
			return tsec__seterr(err, TSEC_EINCOMPLETE, k.text[0], "only %d of the "
					    "certificate's 3 references exist", present);
		for (int i = 1; i < NKINDS; i++)
			torn |= strcmp(refs[i].gen, refs[0].gen) != 0;
		if (torn)
			continue;  /* read across a publish: read again */
		for (int i = 0; i < NKINDS && !gone; i++) {
			rc = fetch(r, refs[i].blob, bufs[i], lens[i], err);
			if (rc == TSEC_ENOENT) {
				/* Switched and swept since the references were
				 * read, or never there: read them again. */
				gone = 1;
			} else if (rc) {
				tsec_cert_files_free(f);
				return rc;
			} else if (*lens[i] != refs[i].size) {
				tsec_cert_files_free(f);
				return tsec__seterr(err, TSEC_ECORRUPT, refs[i].blob, "blob %s is "
						    "%zu bytes, its reference says %llu",
						    refs[i].blob, *lens[i],
						    (unsigned long long)refs[i].size);
			}
		}
		if (!gone)
			return 0;
		tsec_cert_files_free(f);
		rc = tsec__seterr(err, TSEC_ECORRUPT, k.text[0], "a blob of %s is missing from "
				  "the object store", domain);
	}
	return rc ? rc : tsec__seterr(err, TSEC_EBUSY, k.text[0], "the references of %s kept "
				      "changing while read", domain);
}

int tsec_remote_exists(struct tsec_remote *r, const struct tsec_principal *who,
		       const char *issuer, const char *domain, int *exists,
		       struct tsec_error *err)
{
	char crt[TSEC_KEY_MAX], key[TSEC_KEY_MAX], meta[TSEC_KEY_MAX];

	*exists = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if (tsec__cert_names(issuer, domain, crt, key, meta, sizeof(crt)))
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	return tsec_store_exists(r->coord, who, crt, exists, err);
}

/* ---- publish ---- */

/* Puts back blobs that were removed while something references them. */
static void restore_referenced(struct tsec_remote *r, char (*names)[TSEC__BLOB_NAME_MAX + 1],
			       uint8_t **bytes, size_t *lens, size_t n);

int tsec_remote_publish(struct tsec_remote *r, const struct tsec_principal *who,
			const struct tsec_lock *lk, const char *issuer, const char *domain,
			const struct tsec_cert_files *f, enum tsec_remote_outcome *outcome,
			struct tsec_error *err)
{
	struct refkeys k;
	struct ref old[NKINDS];
	const void *data[NKINDS];
	size_t len[NKINDS], enclen[NKINDS] = { 0 }, total = 0;
	char names[NKINDS][TSEC__BLOB_NAME_MAX + 1], gen[GEN_HEX + 1];
	uint8_t *enc[NKINDS] = { NULL }, rnd[GEN_HEX / 2];
	char *refs[NKINDS] = { NULL };
	bool made[NKINDS] = { false };
	struct tsec_request q[NKINDS];
	int present, rc, same = 0;

	if (outcome)
		*outcome = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if (!f || !f->cert || !f->key || !f->meta)
		return tsec__seterr(err, TSEC_EINVAL, "", "a certificate needs its cert, key and "
				    "metadata");
	data[0] = f->cert, len[0] = f->cert_len;
	data[1] = f->key, len[1] = f->key_len;
	data[2] = f->meta, len[2] = f->meta_len;
	if ((rc = refkeys_of(issuer, domain, &k, err)))
		return rc;
	for (int i = 0; i < NKINDS; i++) {
		if (len[i] > r->blob_max)
			return tsec__seterr(err, TSEC_ETOOBIG, k.text[i], "%s is %zu bytes (at most "
					    "%zu)", k.text[i], len[i], r->blob_max);
		total += BLOB_HDR + len[i] + SEAL_OVERHEAD + REF_MAX;
	}
	/* The bound on what this publish keeps to undo itself: refused
	 * before anything changes. */
	if (total > r->txn_max)
		return tsec__seterr(err, TSEC_ETOOBIG, k.text[0], "publishing %s would keep %zu "
				    "bytes to undo itself (txn_max %zu)", domain, total, r->txn_max);
	/* The policy first, on the logical keys, judging the content. */
	for (int i = 0; i < NKINDS; i++) {
		tsec__req_for(&q[i], "storage.store", &k.sk[i]);
		q[i].ctx.has = TSEC_CTX_SIZE;
		q[i].ctx.size = len[i];
		if (i == 0 && len[0]) {
			q[0].ctx.has |= TSEC_CTX_CERT_PEM;
			q[0].ctx.cert_pem.ptr = data[0];
			q[0].ctx.cert_pem.len = len[0];
		}
	}
	if ((rc = tsec__store_check(r->coord, who, q, NKINDS, err)))
		return rc;
	for (int i = 0; i < NKINDS; i++)
		address(r, i, data[i], len[i], names[i]);
	/* Already current: nothing to do. */
	if (read_refs(r, &k, old, &present, err) == 0 && present == NKINDS) {
		for (int i = 0; i < NKINDS; i++)
			same += !strcmp(old[i].blob, names[i]) && !strcmp(old[i].gen, old[0].gen);
		if (same == NKINDS) {
			/* Current; a blob lost from the object store is put
			 * back. */
			for (int i = 0; i < NKINDS; i++) {
				uint8_t *b;
				size_t bl;
				rc = r->blobs->ops->has(r->blobs, names[i], err);
				if (rc == TSEC_ENOENT &&
				    (rc = encode(r, i, names[i], data[i], len[i], &b, &bl, err)) == 0) {
					rc = r->blobs->ops->put_new(r->blobs, names[i], b, bl, err);
					sodium_memzero(b, bl);
					free(b);
					if (rc == TSEC_EEXIST)
						rc = 0;
				}
				if (rc)
					return rc;
			}
			if (outcome)
				*outcome = TSEC_REMOTE_UNCHANGED;
			return 0;
		}
	}
	/* The blobs, each written only where absent; one there already must
	 * be this content (conflict-and-verify). */
	for (int i = 0; i < NKINDS; i++) {
		if ((rc = encode(r, i, names[i], data[i], len[i], &enc[i], &enclen[i], err)))
			goto undo;
		rc = r->blobs->ops->put_new(r->blobs, names[i], enc[i], enclen[i], err);
		if (rc == 0) {
			made[i] = true;
		} else if (rc == TSEC_EEXIST) {
			char *there;
			size_t tn;
			if ((rc = fetch(r, names[i], &there, &tn, err))) {
				if (rc == TSEC_ENOENT)
					rc = tsec__seterr(err, TSEC_EBUSY, names[i], "blob %s vanished "
							  "while published", names[i]);
				goto undo;
			}
			rc = tn == len[i] && memcmp(there, data[i], tn) == 0
				? 0 : tsec__seterr(err, TSEC_ECORRUPT, names[i], "a different blob "
						   "sits at %s", names[i]);
			sodium_memzero(there, tn);
			free(there);
			if (rc)
				goto undo;
		} else {
			goto undo;
		}
	}
	if (tsec__remote_after_blobs_hook)
		tsec__remote_after_blobs_hook();
	/* The switch: three references in one coordinator transaction. */
	randombytes_buf(rnd, sizeof(rnd));
	sodium_bin2hex(gen, sizeof(gen), rnd, sizeof(rnd));
	{
		struct tsec_put puts[NKINDS];
		for (int i = 0; i < NKINDS; i++) {
			if (!(refs[i] = ref_text(gen, names[i], len[i], who))) {
				rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
				goto undo;
			}
			puts[i] = (struct tsec_put){ k.text[i], refs[i], strlen(refs[i]) };
		}
		/* The policy was asked above, about the certificate. */
		if ((rc = tsec__store_put_checked(r->coord, lk, puts, NKINDS, NULL, err)))
			goto undo;
	}
	/* A sweeper that judged a blob unreferenced before the switch may
	 * have removed it since: put back any that is gone. */
	for (int i = 0; i < NKINDS; i++) {
		struct tsec_error e2;
		if (r->blobs->ops->has(r->blobs, names[i], &e2) == TSEC_ENOENT)
			r->blobs->ops->put_new(r->blobs, names[i], enc[i], enclen[i], &e2);
	}
	if (outcome)
		*outcome = TSEC_REMOTE_PUBLISHED;
	rc = 0;
	goto out;
undo:
	/* Compensation: the blobs this publish made go again, and any that a
	 * concurrent publish of the same content relies on comes back. */
	{
		char gone[NKINDS][TSEC__BLOB_NAME_MAX + 1];
		uint8_t *gb[NKINDS];
		size_t gl[NKINDS], ng = 0;
		struct tsec_error e2;
		for (int i = 0; i < NKINDS; i++)
			if (made[i] && r->blobs->ops->del(r->blobs, names[i], &e2) == 0) {
				memcpy(gone[ng], names[i], sizeof(gone[ng]));
				gb[ng] = enc[i];
				gl[ng++] = enclen[i];
			}
		if (ng)
			restore_referenced(r, gone, gb, gl, ng);
	}
out:
	for (int i = 0; i < NKINDS; i++) {
		if (enc[i])
			sodium_memzero(enc[i], enclen[i]);
		free(enc[i]);
		free(refs[i]);
	}
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
	char dst[TSEC_KEY_MAX];
	int rc;

	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = archive_key_of(&k, name, dst, sizeof(dst), err)))
		return rc;
	return lk ? tsec_store_move_fenced(r->coord, who, lk, k.text[1], dst, err)
		  : tsec_store_move(r->coord, who, k.text[1], dst, err);
}

int tsec_remote_load_archived(struct tsec_remote *r, const struct tsec_principal *who,
			      const char *issuer, const char *domain, const char *name,
			      char **out, size_t *len, struct tsec_error *err)
{
	struct refkeys k;
	struct ref ref;
	char dst[TSEC_KEY_MAX], *t = NULL;
	size_t n;
	int rc;

	*out = NULL;
	*len = 0;
	if (!r)
		return tsec__seterr(err, TSEC_EINVAL, "", "no remote store");
	if ((rc = refkeys_of(issuer, domain, &k, err)) ||
	    (rc = archive_key_of(&k, name, dst, sizeof(dst), err)) ||
	    (rc = tsec_store_get(r->coord, who, dst, &t, &n, err)))
		return rc;
	rc = parse_ref(t, n, 1, &ref, dst, err);
	free(t);
	if (rc)
		return rc;
	if (!who || who->id.len != strlen(ref.by) || memcmp(who->id.ptr, ref.by, who->id.len))
		return tsec__seterr(err, TSEC_EDENIED, dst, "an archived key is only for the "
				    "principal that published it");
	return fetch(r, ref.blob, out, len, err);
}

/* ---- the sweeper ---- */

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
		struct ref ref;
		char *t;
		size_t n;
		int kind = -1;

		if (tsec__skey_parse(l.v[i], false, &sk, &e2) ||
		    be->ops->get(be, &sk, REF_MAX, &t, &n, &e2))
			continue;   /* a folder, gone meanwhile, or not ours */
		if (n && t[0] == '{') {
			json_t *j = json_loadb(t, n, 0, NULL);
			const char *b = json_string_value(json_object_get(j, "blob"));
			for (int x = 0; b && x < NKINDS; x++)
				if (!strncmp(b, kind_name[x], strlen(kind_name[x])))
					kind = x;
			json_decref(j);
		}
		if (kind >= 0 && parse_ref(t, n, kind, &ref, l.v[i], &e2) == 0 &&
		    nameset_add(out, ref.blob))
			rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		free(t);
	}
	tsec_strlist_free(&l);
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(out->v[0]), cmp_name);
	return rc;
}

static void restore_referenced(struct tsec_remote *r, char (*names)[TSEC__BLOB_NAME_MAX + 1],
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
	return strcmp(((const struct cand *)a)->name, ((const struct cand *)b)->name);
}

/* The candidates are kept sorted by name between sweeps (those a sweep
 * adds go after the sorted ones, which is all it looks up). */
static struct cand *cand_find(struct tsec_remote *r, size_t nsorted, const char *name)
{
	struct cand key;

	snprintf(key.name, sizeof(key.name), "%s", name);
	return nsorted ? bsearch(&key, r->cand, nsorted, sizeof(*r->cand), cmp_cand) : NULL;
}

static int on_blob(void *ctx, const char *name, int64_t mtime_ms)
{
	struct sweep_ctx *c = ctx;
	struct tsec_remote *r = c->r;
	struct cand *k;

	(void)mtime_ms;
	c->st->blobs++;
	if (nameset_has(c->refd, name)) {
		c->st->referenced++;
		return 0;
	}
	if (!(k = cand_find(r, c->nsorted, name))) {
		if (r->ncand == r->capcand) {
			size_t cap = r->capcand ? 2 * r->capcand : 64;
			struct cand *nv = realloc(r->cand, cap * sizeof(*nv));
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
		if (r->blobs->ops->get(r->blobs, doomed->v[i], r->blob_max + BLOB_HDR + SEAL_OVERHEAD,
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
		restore_referenced(r, gone, b, l, ng);
	for (size_t i = 0; i < ng; i++) {
		struct cand *k = cand_find(r, r->ncand, gone[i]);
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
