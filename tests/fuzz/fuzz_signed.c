/*
 * libFuzzer: the readers of signed policies (issue 52, item 8): a policy
 * file with its detached ".sig" (tsec__policy_read) and a fleet bundle
 * or a broker's seen record (tsec__fleet_bundle_open).  The first byte
 * picks; the rest, split at its first NUL, is a policy text and a
 * signature text, or whole, a bundle or a policy text to bundle.  The harness holds the signing key, so
 * it can also sign what the fuzzer wrote and reach past the signature:
 * a read must succeed exactly when the signature is the key's over the
 * very bytes, and give those bytes back whole.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "broker/daemon/daemon.h"
#include "common/sign.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
static char path[64], sigpath[70];

static void remove_files(void)
{
	unlink(path);
	unlink(sigpath);
}

static void put(const char *p, const void *b, size_t n)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || (n && write(fd, b, n) != (ssize_t)n) || close(fd))
		abort();
}

/* The key's signature over b[0..n) in hex, with what whitespace bits ask. */
static void sign_hex(const void *b, size_t n, unsigned bits, char *out, size_t cap)
{
	unsigned char sig[crypto_sign_BYTES];
	char hex[crypto_sign_BYTES * 2 + 1];

	crypto_sign_detached(sig, NULL, b, n, sk);
	sodium_bin2hex(hex, sizeof(hex), sig, sizeof(sig));
	snprintf(out, cap, "%s%s%s", bits & 1 ? " \t" : "", hex, bits & 2 ? "\r\n" : "\n");
}

static void file_case(unsigned flags, const char *pol, size_t pn, const char *sig, size_t sn)
{
	char genuine[200], *text = NULL;
	struct tsec_error err;
	size_t len = 0;
	int rc;

	put(path, pol, pn);
	if (flags & 2) {
		sign_hex(pol, pn, flags >> 4, genuine, sizeof(genuine));
		put(sigpath, genuine, strlen(genuine));
	} else {
		put(sigpath, sig, sn);
	}
	rc = tsec__policy_read(path, pk, &text, &len, &err);
	if ((flags & 2) ? rc && pn : !rc)
		abort();             /* a genuine one refused, or a forgery read */
	if (!rc && (len != pn || memcmp(text, pol, pn)))
		abort();
	free(text);
}

static void bundle_case(unsigned flags, const char *pol, size_t pn, const char *rest, size_t rn)
{
	char genuine[200], *b = NULL, *text = NULL;
	struct tsec_error err;
	size_t blen, tlen = 0;
	json_t *j = NULL, *ps;
	int rc;

	if (flags & 2) {
		/* A bundle the key signed, over a policy text the fuzzer wrote
		 * (JSON escapes it: any valid UTF-8, NUL bytes included). */
		if (!(ps = json_stringn(pol, pn)))
			return;
		sign_hex(pol, pn, 0, genuine, sizeof(genuine));
		genuine[strlen(genuine) - 1] = '\0';
		j = json_pack("{s:o, s:s}", "policy", ps, "signature", genuine);
		if (!j || !(b = json_dumps(j, JSON_COMPACT)))
			abort();
		blen = strlen(b);
	} else {
		b = malloc(rn + 1);
		memcpy(b, rest, rn);
		blen = rn;
	}
	rc = tsec__fleet_bundle_open(pk, b, blen, &text, &tlen, &err);
	/* A genuine bundle is refused only for a NUL in its policy (jansson
	 * reads no \u0000 into a string, and a policy text holds none). */
	if ((flags & 2) && rc && !memchr(pol, 0, pn))
		abort();
	if (!(flags & 2) && !rc)
		abort();             /* a bundle the key never signed, read */
	if (!rc) {
		unsigned char h[32];

		if ((flags & 2) && (tlen != pn || memcmp(text, pol, pn)))
			abort();
		crypto_hash_sha256(h, (const unsigned char *)text, tlen);
		(void)tsec__policy_revision_of(text, tlen);
		free(text);
	}
	if (tsec__fleet_bundle_open(NULL, b, blen, &text, &tlen, &err) == 0)
		abort();             /* no key: nothing is trusted */
	free(text);
	free(b);
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *a, *z;
	size_t an, zn;
	unsigned flags;

	if (!path[0]) {
		if (sodium_init() < 0)
			abort();
		crypto_sign_keypair(pk, sk);
		snprintf(path, sizeof(path), "/tmp/tsec-fuzz-signed-%ld.json", (long)getpid());
		snprintf(sigpath, sizeof(sigpath), "%s.sig", path);
		atexit(remove_files);
	}
	if (!size)
		return 0;
	flags = data[0];
	a = (const char *)data + 1;
	z = memchr(a, 0, size - 1);
	an = z ? (size_t)(z - a) : size - 1;
	z = z ? z + 1 : a + an;
	zn = size - 1 - (size_t)(z - a);
	if (flags & 1)                   /* the whole rest: NUL bytes too */
		bundle_case(flags, (const char *)data + 1, size - 1, (const char *)data + 1,
			    size - 1);
	else
		file_case(flags, a, an, z, zn);
	return 0;
}
