/* Test helper: self-signed certificates made with OpenSSL. */
#ifndef TSEC_CERTGEN_H
#define TSEC_CERTGEN_H

#include <stddef.h>

/*
 * A new PEM (free() it) of a self-signed certificate with DNS SANs
 * `sans` (comma-separated, NULL for none), a key of type "rsa1024",
 * "rsa2048", "ec-p256", "ec-p384" or "ed25519" (keys are made once per
 * type and reused), valid from now + from_s to now + to_s seconds.
 * *len gets the PEM's length.  Aborts on failure.
 */
char *tu_cert(const char *keytype, const char *sans, long from_s, long to_s,
	      size_t *len);

/* The PEM of the private key of that type (free() it). */
char *tu_key_pem(const char *keytype, size_t *len);

#endif
