#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tests/certgen.h"

static const char *const types[] = { "rsa1024", "rsa2048", "ec-p256", "ec-p384", "ed25519" };
static EVP_PKEY *keys[5];

static void die(const char *what)
{
	fprintf(stderr, "certgen: %s failed\n", what);
	abort();
}

static EVP_PKEY *key_of(const char *type)
{
	for (int i = 0; i < 5; i++) {
		if (strcmp(types[i], type) != 0)
			continue;
		if (!keys[i]) {
			switch (i) {
			case 0: keys[i] = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024); break;
			case 1: keys[i] = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048); break;
			case 2: keys[i] = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256"); break;
			case 3: keys[i] = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384"); break;
			default: keys[i] = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"); break;
			}
			if (!keys[i])
				die("keygen");
		}
		return keys[i];
	}
	die("key type");
	return NULL;
}

static char *bio_text(BIO *b, size_t *len)
{
	char *p, *out;
	long n = BIO_get_mem_data(b, &p);

	out = malloc((size_t)n + 1);
	if (!out)
		die("malloc");
	memcpy(out, p, (size_t)n);
	out[n] = '\0';
	if (len)
		*len = (size_t)n;
	return out;
}

char *tu_cert(const char *keytype, const char *sans, long from_s, long to_s,
	      size_t *len)
{
	static long serial = 1;
	EVP_PKEY *k = key_of(keytype);
	X509 *x = X509_new();
	X509_NAME *nm;
	BIO *b;
	char *pem;

	if (!x)
		die("X509_new");
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
	X509_gmtime_adj(X509_getm_notBefore(x), from_s);
	X509_gmtime_adj(X509_getm_notAfter(x), to_s);
	X509_set_pubkey(x, k);
	nm = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)"tsec test", -1, -1, 0);
	X509_set_issuer_name(x, nm);
	if (sans) {
		char buf[1024] = "";
		char *copy = strdup(sans), *save = NULL;
		for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			strncat(buf, *buf ? ",DNS:" : "DNS:", sizeof(buf) - strlen(buf) - 1);
			strncat(buf, t, sizeof(buf) - strlen(buf) - 1);
		}
		free(copy);
		X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, buf);
		if (!ext || !X509_add_ext(x, ext, -1))
			die("SAN");
		X509_EXTENSION_free(ext);
	}
	if (!X509_sign(x, k, strcmp(keytype, "ed25519") ? EVP_sha256() : NULL))
		die("sign");
	b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	pem = bio_text(b, len);
	BIO_free(b);
	X509_free(x);
	return pem;
}

char *tu_key_pem(const char *keytype, size_t *len)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *pem;

	PEM_write_bio_PrivateKey(b, key_of(keytype), NULL, NULL, 0, NULL, NULL);
	pem = bio_text(b, len);
	BIO_free(b);
	return pem;
}
