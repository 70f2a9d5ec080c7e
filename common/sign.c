/* Policy signatures: detached Ed25519 over the policy file's bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/sign.h"
#include "common/error.h"
#include "common/file.h"

int tsec__hex_decode(const char *hex, unsigned char *out, size_t n)
{
	size_t got = 0;
	const char *end = NULL;

	while (*hex == ' ' || *hex == '\n' || *hex == '\t' || *hex == '\r')
		hex++;
	if (sodium_hex2bin(out, n, hex, strlen(hex), NULL, &got, &end) != 0 || got != n)
		return -1;
	while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')
		end++;
	return *end ? -1 : 0;
}

int tsec__key_file_read(const char *path, unsigned char *out, size_t n,
			struct tsec_error *err)
{
	char *text = NULL;
	size_t len;
	int rc;

	if ((rc = tsec_read_file(path, 4096, &text, &len, err)))
		return rc;
	rc = tsec__hex_decode(text, out, n) ? tsec__seterr(err, TSEC_EINVAL, path,
			"%s: not a key of %zu bytes in hex", path, n) : 0;
	sodium_memzero(text, len);
	free(text);
	return rc;
}

int tsec__policy_read(const char *path, const unsigned char *pk, char **text,
		      size_t *len, struct tsec_error *err)
{
	unsigned char sig[TSEC_SIG_BYTES];
	char sigpath[4096], *sigtext = NULL;
	size_t siglen;
	int rc;

	*text = NULL;
	if ((rc = tsec_read_file(path, TSEC_POLICY_MAX, text, len, err)))
		return rc;
	if (!pk)
		return 0;
	snprintf(sigpath, sizeof(sigpath), "%s.sig", path);
	if (tsec_read_file(sigpath, 1024, &sigtext, &siglen, err)) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, sigpath,
				  "%s: policy is not signed (no %s)", path, sigpath);
		goto fail;
	}
	if (tsec__hex_decode(sigtext, sig, sizeof(sig))) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, sigpath, "%s: malformed signature", sigpath);
		goto fail;
	}
	if (crypto_sign_verify_detached(sig, (const unsigned char *)*text, *len, pk) != 0) {
		rc = tsec__seterr(err, TSEC_ESIGNATURE, path,
				  "%s: signature does not verify with the trusted key", path);
		goto fail;
	}
	free(sigtext);
	return 0;
fail:
	free(sigtext);
	free(*text);
	*text = NULL;
	return rc;
}

int tsec__policy_sign(const char *path, const unsigned char *sk,
		      struct tsec_error *err)
{
	unsigned char sig[TSEC_SIG_BYTES];
	char hex[TSEC_SIG_BYTES * 2 + 1], sigpath[4096], *text = NULL;
	size_t len;
	FILE *f;
	int rc;

	if ((rc = tsec_read_file(path, TSEC_POLICY_MAX, &text, &len, err)))
		return rc;
	crypto_sign_detached(sig, NULL, (const unsigned char *)text, len, sk);
	free(text);
	sodium_bin2hex(hex, sizeof(hex), sig, sizeof(sig));
	snprintf(sigpath, sizeof(sigpath), "%s.sig", path);
	f = fopen(sigpath, "w");
	if (!f || fprintf(f, "%s\n", hex) < 0 || fclose(f) != 0)
		return tsec__seterr(err, TSEC_EIO, sigpath, "%s: cannot write", sigpath);
	return 0;
}
