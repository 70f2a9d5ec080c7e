/*
 * Certificate inspection for `when.cert` conditions (OpenSSL), and a small
 * cache of parsed results keyed by the PEM's SHA-256.
 *
 * This is the one place in the module that allocates (OpenSSL does, while
 * parsing) and takes a lock (the cache's mutex).  Both happen only for a
 * request that carries a PEM and reaches a rule with certificate
 * conditions; parsing costs tens of microseconds, so a mutex around a
 * table lookup is not what such a request waits on.  Plain requests never
 * come here.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "module/module_private.h"

#define CACHE_SLOTS 64
#define PEM_MAX (1u << 20)

struct tsec__certcache {
	pthread_mutex_t lock;
	uint32_t next;               /* FIFO replacement cursor */
	uint32_t used;
	struct tsec__cert_facts slot[CACHE_SLOTS];
};

static const char *const key_type_names[TSEC__KEYTYPE__COUNT] = {
	"other", "rsa", "ec-p256", "ec-p384", "ed25519",
};

int tsec__key_type_parse(const char *s, size_t n)
{
	for (int i = 1; i < TSEC__KEYTYPE__COUNT; i++)
		if (strlen(key_type_names[i]) == n && memcmp(key_type_names[i], s, n) == 0)
			return i;
	return -1;
}

int tsec__certcache_new(struct tsec__certcache **out)
{
	struct tsec__certcache *c = calloc(1, sizeof(*c));

	*out = c;
	if (!c)
		return TSEC_ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	return 0;
}

void tsec__certcache_free(struct tsec__certcache **pc)
{
	if (!pc || !*pc)
		return;
	pthread_mutex_destroy(&(*pc)->lock);
	free(*pc);
	*pc = NULL;
}

static void fail(struct tsec__cert_facts *f, const char *msg)
{
	f->ok = 0;
	snprintf(f->error, sizeof(f->error), "%s", msg);
	ERR_clear_error();
}

static void add_name(struct tsec__cert_facts *f, const unsigned char *s, int n)
{
	if (n <= 0 || n > 253 || f->nsans == TSEC__CERT_SANS ||
	    f->names_len + (size_t)n > sizeof(f->names))
		return;
	f->san_off[f->nsans] = (uint16_t)f->names_len;
	f->san_len[f->nsans] = (uint8_t)n;
	for (int i = 0; i < n; i++) {
		char c = (char)s[i];
		f->names[f->names_len++] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
	}
	f->nsans++;
}

static void parse(const char *pem, size_t len, struct tsec__cert_facts *f)
{
	GENERAL_NAMES *gens = NULL;
	X509 *x = NULL;
	BIO *bio = NULL;
	EVP_PKEY *pk;
	struct tm tm;

	f->ok = 0;
	f->error[0] = '\0';
	f->nsans = 0;
	f->names_len = 0;
	f->key_type = TSEC__KEYTYPE_OTHER;
	f->rsa_bits = 0;
	f->not_after = 0;
	if (len > PEM_MAX) {
		fail(f, "certificate PEM larger than 1 MiB");
		return;
	}
	bio = BIO_new_mem_buf(pem, (int)len);
	if (!bio) {
		fail(f, "out of memory reading certificate");
		return;
	}
	x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	if (!x) {
		fail(f, "the value stored as a certificate holds no PEM certificate");
		goto out;
	}
	memset(&tm, 0, sizeof(tm));
	if (!ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm)) {
		fail(f, "certificate has a malformed notAfter");
		goto out;
	}
	f->not_after = (int64_t)timegm(&tm);
	pk = X509_get0_pubkey(x);
	if (!pk) {
		fail(f, "certificate public key does not parse");
		goto out;
	}
	switch (EVP_PKEY_get_base_id(pk)) {
	case EVP_PKEY_RSA:
		f->key_type = TSEC__KEYTYPE_RSA;
		f->rsa_bits = (uint32_t)EVP_PKEY_get_bits(pk);
		break;
	case EVP_PKEY_EC: {
		char group[64];
		size_t gl = 0;
		if (EVP_PKEY_get_group_name(pk, group, sizeof(group), &gl)) {
			if (!strcmp(group, "prime256v1") || !strcmp(group, "P-256"))
				f->key_type = TSEC__KEYTYPE_EC_P256;
			else if (!strcmp(group, "secp384r1") || !strcmp(group, "P-384"))
				f->key_type = TSEC__KEYTYPE_EC_P384;
		}
		break;
	}
	case EVP_PKEY_ED25519:
		f->key_type = TSEC__KEYTYPE_ED25519;
		break;
	default:
		break;
	}
	gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		if (g->type == GEN_DNS)
			add_name(f, ASN1_STRING_get0_data(g->d.dNSName),
				 ASN1_STRING_length(g->d.dNSName));
	}
	f->ok = 1;
	ERR_clear_error();
out:
	GENERAL_NAMES_free(gens);
	X509_free(x);
	BIO_free(bio);
}

void tsec__cert_facts_get(struct tsec__certcache *c, bool insert,
			  const char *pem, size_t len,
			  struct tsec__cert_facts *f)
{
	unsigned int hl = 0;

	if (!EVP_Digest(pem, len, f->hash, &hl, EVP_sha256(), NULL) || hl != 32) {
		fail(f, "cannot hash certificate");
		return;
	}
	if (c) {
		bool hit = false;
		pthread_mutex_lock(&c->lock);
		for (uint32_t i = 0; i < c->used && !hit; i++) {
			if (memcmp(c->slot[i].hash, f->hash, 32) == 0) {
				*f = c->slot[i];
				hit = true;
			}
		}
		pthread_mutex_unlock(&c->lock);
		if (hit)
			return;
	}
	parse(pem, len, f);
	if (c && insert) {
		pthread_mutex_lock(&c->lock);
		c->slot[c->next] = *f;
		c->next = (c->next + 1) % CACHE_SLOTS;
		if (c->used < CACHE_SLOTS)
			c->used++;
		pthread_mutex_unlock(&c->lock);
	}
}

uint32_t tsec__certcache_size(struct tsec__certcache *c)
{
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	n = c->used;
	pthread_mutex_unlock(&c->lock);
	return n;
}
