/*
 * Filling the certificate cache: a PEM certificate parsed by OpenSSL
 * (its SHA-256 identity, DNS names and not_after), and every certificate
 * of a store (certcache.c keeps them).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tinysecurity/certcache.h"
#include "tinysecurity/store.h"
#include "broker/certcache/certcache_private.h"
#include "common/error.h"

int tsec_certcache_insert(struct tsec_certcache *c, const char *pem,
			  size_t len, void *data, struct tsec_error *err)
{
	uint8_t id[32];

	return tsec__certcache_insert_id(c, pem, len, data, id, err);
}

int tsec__certcache_insert_id(struct tsec_certcache *c, const char *pem, size_t len,
			      void *data, uint8_t id[32], struct tsec_error *err)
{
	GENERAL_NAMES *gens = NULL;
	const char *names[NAMES_MAX];
	char *copies[NAMES_MAX];
	unsigned char *der = NULL;
	unsigned int idlen = 0;
	size_t nn = 0;
	X509 *x = NULL;
	BIO *bio = NULL;
	struct tm tm;
	int derlen, rc;

	if (!c || !pem || len == 0 || len > (1u << 20))
		return tsec__seterr(err, TSEC_EINVAL, "", "no PEM, or larger than 1 MiB");
	bio = BIO_new_mem_buf(pem, (int)len);
	x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	if (!x) {
		rc = tsec__seterr(err, TSEC_ECERT, "", "PEM holds no parsable certificate");
		goto out;
	}
	derlen = i2d_X509(x, &der);
	if (derlen <= 0 || !EVP_Digest(der, (size_t)derlen, id, &idlen, EVP_sha256(), NULL)) {
		rc = tsec__seterr(err, TSEC_ECERT, "", "cannot encode certificate");
		goto out;
	}
	memset(&tm, 0, sizeof(tm));
	ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm);
	gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens) && nn < NAMES_MAX; i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		const unsigned char *s;
		int l;
		if (g->type != GEN_DNS)
			continue;
		s = ASN1_STRING_get0_data(g->d.dNSName);
		l = ASN1_STRING_length(g->d.dNSName);
		if (l <= 0 || l > NAME_MAX_LEN || memchr(s, '\0', (size_t)l))
			continue;
		copies[nn] = strndup((const char *)s, (size_t)l);
		if (!copies[nn])
			break;
		names[nn] = copies[nn];
		nn++;
	}
	if (nn == 0) {
		rc = tsec__seterr(err, TSEC_ECERT, "", "certificate has no DNS name");
		goto out;
	}
	rc = tsec_certcache_insert_names(c, id, names, nn, (int64_t)timegm(&tm), data, err);
	for (size_t i = 0; i < nn; i++)
		free(copies[i]);
out:
	ERR_clear_error();
	GENERAL_NAMES_free(gens);
	OPENSSL_free(der);
	X509_free(x);
	BIO_free(bio);
	return rc;
}

int tsec_certcache_fill(struct tsec_certcache *c, struct tsec_store *s,
			const struct tsec_principal *who, size_t *skipped,
			struct tsec_error *err)
{
	struct tsec_strlist l = { 0 };
	size_t skip = 0;
	int rc;

	rc = tsec_store_list(s, who, "certificates", 1, &l, err);
	if (rc == TSEC_ENOENT)
		rc = 0;
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		struct tsec_error e2;
		size_t n = strlen(l.v[i]), len;
		char *pem;
		if (n < 4 || strcmp(l.v[i] + n - 4, ".crt") != 0)
			continue;
		if (tsec_store_get(s, who, l.v[i], &pem, &len, &e2)) {
			skip++;
			continue;
		}
		int irc = tsec_certcache_insert(c, pem, len, NULL, &e2);
		if (irc && irc != TSEC_EEXIST)
			skip++;
		free(pem);
	}
	tsec_strlist_free(&l);
	if (skipped)
		*skipped = skip;
	return rc;
}
