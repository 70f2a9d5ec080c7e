/*
 * Small secret files (secret.c), for whoever needs one: the fleet
 * backends, the remote certificate store, the S3 client.  Each is
 * opened as common/trust.c opens a secret: reached as written through
 * folders nobody else may write, this user's or root's, readable by
 * nobody else, one link, and not inside a store's root or a blob folder.
 */
#ifndef TSEC_COMMON_SECRET_H
#define TSEC_COMMON_SECRET_H

#include <stddef.h>
#include <stdint.h>

#include "tinysecurity/types.h"

#define TSEC__KEY32 32

/* A key file: 32 raw bytes, or 64 hex digits and an optional newline,
 * into key.  0, or an error (key wiped). */
int tsec__key32_load(const char *path, uint8_t key[TSEC__KEY32], struct tsec_error *err);

/* A password file's first line into out (NUL-terminated).  0, or
 * TSEC_EINVAL for an empty line or one of outlen bytes or more. */
int tsec__password_load(const char *path, char *out, size_t outlen, struct tsec_error *err);

#endif
