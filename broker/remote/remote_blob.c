/*
 * Blobs of the remote certificate store: their addresses, their bytes
 * (a private key sealed) and their verification (remote_private.h has
 * the format).  A blob belongs to one certificate: its address and a
 * sealed key's associated data both hold "<issuer>/<domain>", so a blob
 * named in another certificate's reference never verifies there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/remote/remote_private.h"
#include "common/error.h"

const char *const tsec__rkind[TSEC__RK] = { "crt", "key", "meta" };

static const char BLOB_MAGIC[4] = { 'T', 'S', 'B', '2' };

int tsec__blob_name_ok(const char *name)
{
	const char *hex = NULL;

	for (int i = 0; i < TSEC__RK; i++) {
		size_t n = strlen(tsec__rkind[i]);
		if (!strncmp(name, tsec__rkind[i], n) && name[n] == '/')
			hex = name + n + 1;
	}
	if (!hex || strlen(hex) != 64)
		return 0;
	for (; *hex; hex++)
		if (!((*hex >= '0' && *hex <= '9') || (*hex >= 'a' && *hex <= 'f')))
			return 0;
	return 1;
}

int tsec__rbind_of(const char *issuer, const char *domain, struct tsec__rbind *b,
		   struct tsec_error *err)
{
	int n;

	if (!issuer || !domain)
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	n = snprintf(b->text, sizeof(b->text), "%s/%s", issuer, domain);
	if (n < 0 || (size_t)n >= sizeof(b->text))
		return tsec__seterr(err, TSEC_EKEY, "", "unusable issuer or domain");
	b->len = (size_t)n;
	return 0;
}

/* The kind a blob name is of, or -1. */
static int kind_of(const char *name)
{
	for (int i = 0; i < TSEC__RK; i++) {
		size_t n = strlen(tsec__rkind[i]);
		if (!strncmp(name, tsec__rkind[i], n) && name[n] == '/')
			return i;
	}
	return -1;
}

void tsec__rblob_address(const struct tsec_remote *r, int kind, const struct tsec__rbind *b,
			 const void *data, size_t len, char name[TSEC__BLOB_NAME_MAX + 1])
{
	static const uint8_t head[] = "tsec-blob\0\2";
	crypto_generichash_state st;
	uint8_t h[32];
	size_t kl = strlen(tsec__rkind[kind]);

	st = r->st_addr;
	crypto_generichash_update(&st, head, sizeof(head) - 1);
	crypto_generichash_update(&st, (const uint8_t *)tsec__rkind[kind], kl + 1);
	crypto_generichash_update(&st, (const uint8_t *)b->text, b->len + 1);
	crypto_generichash_update(&st, data, len);
	crypto_generichash_final(&st, h, sizeof(h));
	memcpy(name, tsec__rkind[kind], kl);
	name[kl] = '/';
	sodium_bin2hex(name + kl + 1, 65, h, sizeof(h));
}

/* A sealed blob's associated data: its name, NUL, the certificate. */
static size_t seal_ad(const char *name, const struct tsec__rbind *b,
		      uint8_t ad[TSEC__BLOB_NAME_MAX + 2 + TSEC_KEY_MAX])
{
	size_t nl = strlen(name);

	memcpy(ad, name, nl + 1);
	memcpy(ad + nl + 1, b->text, b->len);
	return nl + 1 + b->len;
}

int tsec__rblob_encode(const struct tsec_remote *r, int kind, const struct tsec__rbind *b,
		       const char *name, const void *data, size_t len, uint8_t **out,
		       size_t *outlen, struct tsec_error *err)
{
	bool seal = kind == 1 && r->seal_keys;
	size_t n = TSEC__RBLOB_HDR + len + (seal ? TSEC__RSEAL_OVERHEAD : 0);
	uint8_t *buf = malloc(n);

	if (!buf)
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	memcpy(buf, BLOB_MAGIC, 4);
	buf[4] = seal ? 1 : 0;
	if (seal) {
		uint8_t *nonce = buf + TSEC__RBLOB_HDR;
		uint8_t ad[TSEC__BLOB_NAME_MAX + 2 + TSEC_KEY_MAX];
		size_t adl = seal_ad(name, b, ad);
		crypto_generichash_state st;
		unsigned long long clen;

		st = r->st_nonce;
		crypto_generichash_update(&st, ad, adl);
		crypto_generichash_update(&st, data, len);
		crypto_generichash_final(&st, nonce, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
		crypto_aead_xchacha20poly1305_ietf_encrypt(
			nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, &clen, data, len, ad,
			adl, NULL, nonce, r->k_seal);
	} else {
		memcpy(buf + TSEC__RBLOB_HDR, data, len);
	}
	*out = buf;
	*outlen = n;
	return 0;
}

/*
 * The plaintext of blob bytes raw[0..n) of name into a new NUL-terminated
 * buffer, verified against the name and the certificate: TSEC_ECORRUPT
 * when it does not open or does not hash to its address.
 */
static int decode(const struct tsec_remote *r, const char *name, const struct tsec__rbind *b,
		  const uint8_t *raw, size_t n, char **out, size_t *outlen,
		  struct tsec_error *err)
{
	char again[TSEC__BLOB_NAME_MAX + 1];
	int kind = kind_of(name);
	size_t plen;
	char *p;

	*out = NULL;
	if (kind < 0 || n < TSEC__RBLOB_HDR || memcmp(raw, BLOB_MAGIC, 4) || raw[4] > 1 ||
	    (raw[4] == 1 && n < TSEC__RBLOB_HDR + TSEC__RSEAL_OVERHEAD))
		return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s is not a tinysecurity blob "
				    "of format %d", name, TSEC_REMOTE_FORMAT);
	plen = raw[4] ? n - TSEC__RBLOB_HDR - TSEC__RSEAL_OVERHEAD : n - TSEC__RBLOB_HDR;
	if (!(p = malloc(plen + 1)))
		return tsec__seterr(err, TSEC_ENOMEM, name, NULL);
	if (raw[4]) {
		const uint8_t *nonce = raw + TSEC__RBLOB_HDR;
		uint8_t ad[TSEC__BLOB_NAME_MAX + 2 + TSEC_KEY_MAX];
		size_t adl = seal_ad(name, b, ad);
		unsigned long long got;

		if (crypto_aead_xchacha20poly1305_ietf_decrypt(
			    (uint8_t *)p, &got, NULL,
			    nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
			    n - TSEC__RBLOB_HDR - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, ad,
			    adl, nonce, r->k_seal) != 0) {
			free(p);
			return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s does not open as %s's "
					    "with this store's key (altered, another certificate's, "
					    "or another key)", name, b->text);
		}
	} else {
		memcpy(p, raw + TSEC__RBLOB_HDR, plen);
	}
	p[plen] = 0;
	tsec__rblob_address(r, kind, b, p, plen, again);
	if (sodium_memcmp(again, name, strlen(name) + 1) != 0) {
		sodium_memzero(p, plen);
		free(p);
		return tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s does not match its address "
				    "as %s's (altered, another certificate's, or written with "
				    "another key)", name, b->text);
	}
	*out = p;
	*outlen = plen;
	return 0;
}

/* The most a blob's bytes may be. */
static size_t raw_max(const struct tsec_remote *r)
{
	return r->blob_max + TSEC__RBLOB_HDR + TSEC__RSEAL_OVERHEAD;
}

int tsec__rblob_fetch(struct tsec_remote *r, const char *name, const struct tsec__rbind *b,
		      char **out, size_t *len, struct tsec_error *err)
{
	uint8_t *raw;
	size_t n;
	int rc = r->blobs->ops->get(r->blobs, name, raw_max(r), &raw, &n, err);

	*out = NULL;
	if (rc == TSEC_ETOOBIG)
		rc = tsec__seterr(err, TSEC_ECORRUPT, name, "blob %s is larger than any blob this "
				  "store writes", name);
	if (rc) {
		if (rc == TSEC_ECORRUPT)
			atomic_fetch_add(&r->n_corrupt, 1);
		return rc;
	}
	rc = decode(r, name, b, raw, n, out, len, err);
	if (rc == TSEC_ECORRUPT)
		atomic_fetch_add(&r->n_corrupt, 1);
	sodium_memzero(raw, n);
	free(raw);
	return rc;
}

int tsec__rblob_ensure(struct tsec_remote *r, const char *name, const uint8_t *enc, size_t n,
		       bool *made, struct tsec_error *err)
{
	int rc;

	*made = false;
	for (int tries = 0; tries < 3; tries++) {
		uint8_t *there = NULL;
		size_t tn = 0;
		bool same;

		rc = r->blobs->ops->put_new(r->blobs, name, enc, n, err);
		if (rc == 0) {
			*made = true;
			return 0;
		}
		if (rc != TSEC_EEXIST)
			return rc;
		/*
		 * Taken: conflict-and-verify.  A blob's bytes follow from its
		 * name (the encoding is deterministic), so what sits there is
		 * right exactly when it is these bytes: no need to open it.
		 */
		rc = r->blobs->ops->get(r->blobs, name, raw_max(r), &there, &tn, err);
		if (rc == TSEC_ENOENT)
			continue;   /* swept meanwhile: written again */
		/* (Too big, or not a blob at all, as a link planted under its
		 * name: damage, replaced below.) */
		if (rc && rc != TSEC_ETOOBIG && rc != TSEC_ECORRUPT)
			return rc;
		/* A plain compare: these are the bytes the object store holds,
		 * a sealed key's ciphertext at most (a plain key, with
		 * plain_keys, is wiped after). */
		same = rc == 0 && tn == n && memcmp(there, enc, n) == 0;
		if (there) {
			if (!r->seal_keys && !strncmp(name, "key/", 4))
				sodium_memzero(there, tn);
			free(there);
		}
		if (same)
			return 0;
		/*
		 * What sits there is not this content (altered in the object
		 * store, truncated, planted): its name says what it must hold,
		 * and this publish holds exactly that, so it replaces it.
		 */
		atomic_fetch_add(&r->n_corrupt, 1);
		if ((rc = r->blobs->ops->del(r->blobs, name, err)))
			return rc;
		atomic_fetch_add(&r->n_repaired, 1);
	}
	return tsec__seterr(err, TSEC_EBUSY, name, "blob %s kept changing while it was written",
			    name);
}
