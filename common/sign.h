/* Internal: policy signatures (Ed25519, libsodium) and hex helpers. */
#ifndef TSEC_SIGN_H
#define TSEC_SIGN_H

#include <stddef.h>

#include "tinysecurity/types.h"

#define TSEC_SIGN_PK_BYTES 32
#define TSEC_SIGN_SK_BYTES 64
#define TSEC_SIG_BYTES 64
#define TSEC_POLICY_MAX (64u << 20)

/* Decodes exactly n bytes of hex (whitespace around it ignored). 0 or -1. */
int tsec__hex_decode(const char *hex, unsigned char *out, size_t n);

/*
 * Reads a policy file; when pk is not NULL, also PATH.sig (the detached
 * Ed25519 signature in hex) and refuses the policy unless it verifies.
 * *text is new (free() it).  Errors: TSEC_ENOENT, TSEC_EIO, TSEC_ETOOBIG,
 * TSEC_ESIGNATURE (missing, malformed or not verifying).
 */
int tsec__policy_read(const char *path, const unsigned char *pk, char **text,
		      size_t *len, struct tsec_error *err);

/* Signs the file at path with sk, writing PATH.sig.  0 or an error. */
int tsec__policy_sign(const char *path, const unsigned char *sk,
		      struct tsec_error *err);

/* Reads a key file holding hex of n bytes. */
int tsec__key_file_read(const char *path, unsigned char *out, size_t n,
			struct tsec_error *err);

#endif
