/*
 * Internal: a certificate's non-secret attributes (OpenSSL), as the
 * decision log keeps them in place of the certificate, and as `tsec
 * replay` makes a certificate with the same attributes from them: the
 * DNS names, notAfter, the key's type and size, the issuer's name.
 * These are the attributes when.cert conditions decide on.
 */
#ifndef TSEC_COMMON_CERTINFO_H
#define TSEC_COMMON_CERTINFO_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define TSEC_CERTINFO_NAMES 16

struct tsec__certinfo {
	unsigned nnames;
	char names[TSEC_CERTINFO_NAMES][254];
	int64_t not_after;               /* unix seconds */
	char key[16];                    /* "rsa", "ec-p256", "ec-p384", "ed25519", "other" */
	unsigned bits;                   /* the key's size in bits */
	char issuer[128];                /* the issuer's CN (or its whole name) */
};

/* 0, or -1 when pem holds no certificate. */
int tsec__certinfo_of(const char *pem, size_t len, struct tsec__certinfo *out);

/* As JSON: {"names": [...], "not_after": N, "key": K, "bits": N, "issuer": S}. */
json_t *tsec__certinfo_json(const struct tsec__certinfo *ci);

/* From that JSON: 0, or -1 when a member is missing or of the wrong type. */
int tsec__certinfo_from_json(json_t *o, struct tsec__certinfo *out);

/*
 * A certificate with ci's attributes (a public key of its type and size;
 * signed by a P-256 key made once for the process, so it is read for its
 * attributes, never trusted; notBefore a day before notAfter), as PEM
 * (new, NUL-terminated).  NULL when the key cannot be made (an unknown
 * type, RSA under 512 or over 8,192 bits).
 */
char *tsec__certinfo_pem(const struct tsec__certinfo *ci);
/* How many private keys tsec__certinfo_pem has generated in this process
 * (one signer and one key of each non-RSA type, at most: RSA keys are
 * public keys of the size asked, made without generating a key). */
unsigned tsec__certinfo_keys_made(void);

#endif
