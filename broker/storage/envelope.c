/*
 * The value envelope of the fleet backends (fleet.h) and what their
 * options need: the encryption key (read by common/secret.c) and the
 * key prefix.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "broker/storage/fleet.h"
#include "common/secret.h"

int tsec__seal_load(struct tsec__seal *s, const char *path, struct tsec_error *err)
{
	int rc;

	memset(s, 0, sizeof(*s));
	if ((rc = tsec__key32_load(path, s->key, err)))
		return rc;
	s->on = true;
	return 0;
}

int tsec__prefix_norm(const char *prefix, char *out, size_t outlen, struct tsec_error *err)
{
	struct tsec__key k;
	char why[96];

	if (!prefix)
		prefix = TSEC__PREFIX_DEFAULT;
	if (tsec__key_parse(prefix, strlen(prefix), false, &k, why, sizeof(why)))
		return tsec__seterr(err, TSEC_EINVAL, "prefix", "invalid prefix '%s': %s",
				    prefix, why);
	if (tsec__key_format(&k, out, outlen) >= outlen - 1)
		return tsec__seterr(err, TSEC_EINVAL, "prefix", "prefix too long");
	return 0;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The associated data: the backend key, then the header. */
static uint8_t *ad_of(const char *bkey, size_t bklen, const uint8_t *hdr, size_t *adlen)
{
	uint8_t *ad = malloc(bklen + TSEC__ENV_HDR);

	if (ad) {
		memcpy(ad, bkey, bklen);
		memcpy(ad + bklen, hdr, TSEC__ENV_HDR);
		*adlen = bklen + TSEC__ENV_HDR;
	}
	return ad;
}

int tsec__env_wrap(const struct tsec__seal *s, const char *bkey, size_t bklen,
		   const void *value, size_t len, int64_t mtime_ns,
		   uint8_t **out, size_t *outlen, struct tsec_error *err)
{
	size_t cap = len + (s->on ? TSEC__ENV_OVERHEAD : TSEC__ENV_HDR), adlen = 0;
	unsigned long long clen;
	uint8_t *e, *ad;

	*out = NULL;
	if (!(e = malloc(cap ? cap : 1)))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	e[0] = s->on ? TSEC__ENV_SEALED : TSEC__ENV_PLAIN;
	put64(e + 1, (uint64_t)mtime_ns);
	if (!s->on) {
		if (len)
			memcpy(e + TSEC__ENV_HDR, value, len);
		*out = e;
		*outlen = cap;
		return 0;
	}
	if (!(ad = ad_of(bkey, bklen, e, &adlen))) {
		free(e);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	randombytes_buf(e + TSEC__ENV_HDR, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
	crypto_aead_xchacha20poly1305_ietf_encrypt(
		e + TSEC__ENV_HDR + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, &clen,
		value, len, ad, adlen, NULL, e + TSEC__ENV_HDR, s->key);
	free(ad);
	*out = e;
	*outlen = TSEC__ENV_HDR + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + (size_t)clen;
	return 0;
}

int tsec__env_unwrap(const struct tsec__seal *s, const char *bkey, size_t bklen,
		     uint8_t *env, size_t envlen, uint8_t **val, size_t *len,
		     int64_t *mtime_ns, struct tsec_error *err)
{
	const size_t nb = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
	unsigned long long plen;
	size_t adlen = 0;
	uint8_t *ad;
	int bad;

	if (envlen < TSEC__ENV_HDR || (env[0] != TSEC__ENV_PLAIN && env[0] != TSEC__ENV_SEALED))
		return tsec__seterr(err, TSEC_EIO, "", "a stored value is not in tinysecurity's "
				    "format (torn or written by something else)");
	*mtime_ns = (int64_t)get64(env + 1);
	if (env[0] == TSEC__ENV_PLAIN) {
		if (s->on)
			return tsec__seterr(err, TSEC_EIO, "", "a stored value is not encrypted "
					    "though encryption is on: refused");
		*val = env + TSEC__ENV_HDR;
		*len = envlen - TSEC__ENV_HDR;
		return 0;
	}
	if (!s->on)
		return tsec__seterr(err, TSEC_EIO, "", "a stored value is encrypted and no "
				    "key_file is configured");
	if (envlen < TSEC__ENV_OVERHEAD)
		return tsec__seterr(err, TSEC_EIO, "", "a sealed value is truncated");
	if (!(ad = ad_of(bkey, bklen, env, &adlen)))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	bad = crypto_aead_xchacha20poly1305_ietf_decrypt(
		env + TSEC__ENV_HDR + nb, &plen, NULL, env + TSEC__ENV_HDR + nb,
		envlen - TSEC__ENV_HDR - nb, ad, adlen, env + TSEC__ENV_HDR, s->key);
	free(ad);
	if (bad)
		return tsec__seterr(err, TSEC_EIO, "", "a sealed value does not open with the "
				    "configured key (another key, or altered)");
	*val = env + TSEC__ENV_HDR + nb;
	*len = (size_t)plen;
	return 0;
}

bool tsec__remote_name_ok(const char *k, size_t n, bool reserved_ok)
{
	struct tsec__key key;
	char why[96], norm[TSEC_KEY_MAX + 1];

	if (n == 0 || n > TSEC_KEY_MAX || memchr(k, '\0', n) ||
	    tsec__key_parse(k, n, false, &key, why, sizeof(why)))
		return false;
	/* Only the normalised spelling, and nothing of the store's own. */
	if (tsec__key_format(&key, norm, sizeof(norm)) != n || memcmp(norm, k, n))
		return false;
	if (reserved_ok)
		return true;
	for (size_t i = 0; i + TSEC__RESERVED_LEN <= n; i++)
		if ((i == 0 || k[i - 1] == '/') && !memcmp(k + i, TSEC__RESERVED, TSEC__RESERVED_LEN))
			return false;
	return true;
}
