/*
 * Small secret files the broker is given (common/secret.h): reached as
 * written through folders nobody else may write (common/trust.c), read
 * whole, wiped after.  Used by the fleet backends (the encryption key,
 * the password), the remote store (its key) and the S3 client (its
 * secret), so it lives below all of them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "common/error.h"
#include "common/secret.h"
#include "common/trust.h"

/*
 * Reads a small secret file: reached as written through folders nobody
 * else may write, this user's or root's, readable by nobody else, one
 * link, and not inside a store's root or a blob folder
 * (common/trust.c; issue 49: a key file another user owned, one in a
 * 0777 folder, and one inside the storage root were all accepted).
 */
static int read_secret(const char *path, const char *role, char *buf, size_t cap, size_t *len,
		       struct tsec_error *err)
{
	struct tsec__trusted t;
	ssize_t n;
	int rc;

	if (!path || !*path)
		return tsec__seterr(err, TSEC_EINVAL, "", "%s: no file named", role);
	if ((rc = tsec__trusted_open(path, TSEC__TRUST_SECRET, false, role, &t, err)))
		return rc;
	n = read(t.fd, buf, cap);
	close(t.fd);
	if (n < 0)
		return tsec__seterr(err, TSEC_EIO, path, "cannot read %s: %s", path, strerror(errno));
	if ((size_t)n == cap)
		return tsec__seterr(err, TSEC_EINVAL, path, "%s is too long", path);
	*len = (size_t)n;
	return 0;
}

int tsec__key32_load(const char *path, uint8_t key[TSEC__KEY32], struct tsec_error *err)
{
	char buf[130];
	size_t n, bin = 0;
	int rc;

	if ((rc = read_secret(path, "the key file", buf, sizeof(buf), &n, err)))
		return rc;
	if (n == TSEC__KEY32) {
		memcpy(key, buf, n);
	} else {
		while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
			n--;
		if (n != 2 * TSEC__KEY32 ||
		    sodium_hex2bin(key, TSEC__KEY32, buf, n, NULL, &bin, NULL) ||
		    bin != TSEC__KEY32) {
			sodium_memzero(buf, sizeof(buf));
			sodium_memzero(key, TSEC__KEY32);
			return tsec__seterr(err, TSEC_EINVAL, path,
					    "%s must hold 32 bytes or 64 hex digits", path);
		}
	}
	sodium_memzero(buf, sizeof(buf));
	return 0;
}

int tsec__password_load(const char *path, char *out, size_t outlen, struct tsec_error *err)
{
	char buf[512];
	size_t n;
	int rc;

	if ((rc = read_secret(path, "the secret file", buf, sizeof(buf), &n, err)))
		return rc;
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\n' || buf[i] == '\r') {
			n = i;
			break;
		}
	if (n == 0 || n >= outlen) {
		sodium_memzero(buf, sizeof(buf));
		return tsec__seterr(err, TSEC_EINVAL, path, "%s: empty or too long a password", path);
	}
	memcpy(out, buf, n);
	out[n] = '\0';
	sodium_memzero(buf, sizeof(buf));
	return 0;
}
