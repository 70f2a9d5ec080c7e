/*
 * A certificate's non-secret attributes, read (for the decision log) and
 * made again (for tsec replay).  See certinfo.h.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/certinfo.h"

int tsec__certinfo_of(const char *pem, size_t len, struct tsec__certinfo *out)
{
	GENERAL_NAMES *gens = NULL;
	BIO *bio = NULL;
	X509 *x = NULL;
	EVP_PKEY *pk;
	struct tm tm;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	snprintf(out->key, sizeof(out->key), "other");
	if (len > (1u << 20) || !(bio = BIO_new_mem_buf(pem, (int)len)) ||
	    !(x = PEM_read_bio_X509(bio, NULL, NULL, NULL)))
		goto out;
	memset(&tm, 0, sizeof(tm));
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm))
		out->not_after = (int64_t)timegm(&tm);
	if ((pk = X509_get0_pubkey(x))) {
		out->bits = (unsigned)EVP_PKEY_get_bits(pk);
		switch (EVP_PKEY_get_base_id(pk)) {
		case EVP_PKEY_RSA:
			snprintf(out->key, sizeof(out->key), "rsa");
			break;
		case EVP_PKEY_EC: {
			char g[64];
			size_t gl = 0;

			if (EVP_PKEY_get_group_name(pk, g, sizeof(g), &gl))
				snprintf(out->key, sizeof(out->key), "%s",
					 !strcmp(g, "prime256v1") || !strcmp(g, "P-256") ? "ec-p256"
					 : !strcmp(g, "secp384r1") || !strcmp(g, "P-384") ? "ec-p384"
					 : "other");
			break;
		}
		case EVP_PKEY_ED25519:
			snprintf(out->key, sizeof(out->key), "ed25519");
			break;
		default:
			break;
		}
	}
	if (X509_NAME_get_text_by_NID(X509_get_issuer_name(x), NID_commonName, out->issuer,
				      sizeof(out->issuer)) < 0)
		X509_NAME_oneline(X509_get_issuer_name(x), out->issuer, sizeof(out->issuer));
	gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		const unsigned char *s;
		int l;

		if (g->type != GEN_DNS || out->nnames == TSEC_CERTINFO_NAMES)
			continue;
		s = ASN1_STRING_get0_data(g->d.dNSName);
		l = ASN1_STRING_length(g->d.dNSName);
		if (l <= 0 || (size_t)l >= sizeof(out->names[0]) || memchr(s, '\0', (size_t)l))
			continue;
		memcpy(out->names[out->nnames], s, (size_t)l);
		out->names[out->nnames++][l] = '\0';
	}
	rc = 0;
out:
	ERR_clear_error();
	GENERAL_NAMES_free(gens);
	X509_free(x);
	BIO_free(bio);
	return rc;
}

json_t *tsec__certinfo_json(const struct tsec__certinfo *ci)
{
	json_t *names = json_array();

	for (unsigned i = 0; i < ci->nnames; i++)
		json_array_append_new(names, json_string(ci->names[i]));
	return json_pack("{s:o,s:I,s:s,s:I,s:s}", "names", names, "not_after",
			 (json_int_t)ci->not_after, "key", ci->key, "bits", (json_int_t)ci->bits,
			 "issuer", ci->issuer);
}

int tsec__certinfo_from_json(json_t *o, struct tsec__certinfo *out)
{
	json_t *names = json_object_get(o, "names"), *v;
	size_t i;

	memset(out, 0, sizeof(*out));
	if (!json_is_array(names) || !json_is_integer(json_object_get(o, "not_after")) ||
	    !json_is_string(json_object_get(o, "key")) ||
	    !json_is_integer(json_object_get(o, "bits")))
		return -1;
	json_array_foreach(names, i, v) {
		if (!json_is_string(v) || out->nnames == TSEC_CERTINFO_NAMES ||
		    json_string_length(v) >= sizeof(out->names[0]))
			return -1;
		snprintf(out->names[out->nnames++], sizeof(out->names[0]), "%s",
			 json_string_value(v));
	}
	out->not_after = (int64_t)json_integer_value(json_object_get(o, "not_after"));
	snprintf(out->key, sizeof(out->key), "%s", json_string_value(json_object_get(o, "key")));
	out->bits = (unsigned)json_integer_value(json_object_get(o, "bits"));
	snprintf(out->issuer, sizeof(out->issuer), "%s",
		 json_is_string(json_object_get(o, "issuer"))
		 ? json_string_value(json_object_get(o, "issuer")) : "replay");
	return 0;
}

static atomic_uint keys_made;

unsigned tsec__certinfo_keys_made(void)
{
	return atomic_load(&keys_made);
}

/*
 * An RSA public key of exactly bits bits: a random odd modulus with its
 * top bit set, and e = 65537.  Nobody holds its private half: the
 * certificate carrying it is signed by signer() and read only for its
 * attributes.  So a log whose lines name a thousand RSA sizes costs a
 * thousand random numbers, not a thousand RSA key generations (issue
 * 52, item 5: seconds a line once eight sizes were cached).
 */
static EVP_PKEY *rsa_shaped(unsigned bits)
{
	BIGNUM *n = BN_new(), *e = BN_new();
	OSSL_PARAM_BLD *b = OSSL_PARAM_BLD_new();
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
	OSSL_PARAM *p = NULL;
	EVP_PKEY *pk = NULL;

	if (n && e && b && ctx && BN_rand(n, (int)bits, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ODD) &&
	    BN_set_word(e, 65537) && OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_N, n) &&
	    OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_E, e) &&
	    (p = OSSL_PARAM_BLD_to_param(b)) && EVP_PKEY_fromdata_init(ctx) > 0 &&
	    EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, p) <= 0)
		pk = NULL;
	OSSL_PARAM_free(p);
	OSSL_PARAM_BLD_free(b);
	EVP_PKEY_CTX_free(ctx);
	BN_free(n);
	BN_free(e);
	return pk;
}

/*
 * The key that signs every certificate made here (P-256, made once for
 * the process), and the keys of the other types (one each, kept): a new
 * reference (EVP_PKEY_free it), or NULL.  type NULL: the signer.
 */
static EVP_PKEY *kept_key(const char *type)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static const char *const types[] = { "signer", "ec-p256", "ec-p384", "ed25519" };
	static EVP_PKEY *made[4];
	EVP_PKEY *pk = NULL;
	size_t i;

	for (i = 0; i < 4 && strcmp(types[i], type ? type : "signer"); i++)
		;
	if (i == 4)
		return NULL;
	pthread_mutex_lock(&lock);
	if (!made[i]) {
		made[i] = i == 3 ? EVP_PKEY_Q_keygen(NULL, NULL, "ED25519")
			: EVP_EC_gen(i == 2 ? "P-384" : "P-256");
		if (made[i])
			atomic_fetch_add(&keys_made, 1);
	}
	if ((pk = made[i]))
		EVP_PKEY_up_ref(pk);
	pthread_mutex_unlock(&lock);
	return pk;
}

/* A public key of ci's type and size (RSA of 512 to 8,192 bits). */
static EVP_PKEY *key_like(const struct tsec__certinfo *ci)
{
	if (!strcmp(ci->key, "rsa"))
		return ci->bits >= 512 && ci->bits <= 8192 ? rsa_shaped(ci->bits) : NULL;
	return kept_key(ci->key);
}

char *tsec__certinfo_pem(const struct tsec__certinfo *ci)
{
	EVP_PKEY *pk = key_like(ci), *signer = pk ? kept_key(NULL) : NULL;
	X509 *x = signer ? X509_new() : NULL;
	GENERAL_NAMES *gens = NULL;
	X509_NAME *name;
	BIO *bio = NULL;
	char *pem = NULL, *data;
	long n;
	bool ok = x != NULL;

	if (ok) {
		int64_t nb = ci->not_after - 86400;

		ok = X509_set_version(x, 2) && ASN1_INTEGER_set(X509_get_serialNumber(x), 1) &&
		     ASN1_TIME_set(X509_getm_notBefore(x), (time_t)nb) &&
		     ASN1_TIME_set(X509_getm_notAfter(x), (time_t)ci->not_after) &&
		     X509_set_pubkey(x, pk);
	}
	if (ok && (name = X509_get_subject_name(x)))
		ok = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
						(const unsigned char *)(ci->nnames ? ci->names[0]
									: "replay"), -1, -1, 0) &&
		     X509_set_issuer_name(x, name);
	if (ok && ci->nnames && (gens = sk_GENERAL_NAME_new_null())) {
		for (unsigned i = 0; ok && i < ci->nnames; i++) {
			GENERAL_NAME *g = GENERAL_NAME_new();
			ASN1_IA5STRING *s = ASN1_IA5STRING_new();

			ok = g && s && ASN1_STRING_set(s, ci->names[i], -1);
			if (ok) {
				GENERAL_NAME_set0_value(g, GEN_DNS, s);
				ok = sk_GENERAL_NAME_push(gens, g) > 0;
			} else {
				GENERAL_NAME_free(g);
				ASN1_IA5STRING_free(s);
			}
		}
		ok = ok && X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, 0) == 1;
	}
	if (ok)
		ok = X509_sign(x, signer, EVP_sha256()) > 0;
	if (ok && (bio = BIO_new(BIO_s_mem())) && PEM_write_bio_X509(bio, x) &&
	    (n = BIO_get_mem_data(bio, &data)) > 0 && (pem = malloc((size_t)n + 1))) {
		memcpy(pem, data, (size_t)n);
		pem[n] = '\0';
	}
	ERR_clear_error();
	GENERAL_NAMES_free(gens);
	BIO_free(bio);
	X509_free(x);
	EVP_PKEY_free(pk);
	EVP_PKEY_free(signer);
	return pem;
}
