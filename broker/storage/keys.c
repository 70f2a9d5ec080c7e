/*
 * Storage keys as the store and every backend see them, below both (no
 * call goes up into store.c): parsing and normalising a key by the key
 * rules (common/key.c) into struct tsec__skey, lists of keys, and where
 * a key lies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"

static int parse(const char *key, bool root_ok, bool store_ok, struct tsec__skey *sk,
		 struct tsec_error *err)
{
	char why[96];
	size_t len, n;

	if (!key)
		return tsec__seterr(err, TSEC_EKEY, "", "NULL key");
	len = strlen(key);
	if (tsec__key_parse(key, len, root_ok, &sk->k, why, sizeof(why)))
		return tsec__seterr(err, TSEC_EKEY, "key", "invalid key: %s", why);
	if (tsec__key_is_normal(&sk->k, len)) {
		/* Already normal: the text is the key, the offsets stand. */
		memcpy(sk->text, key, len + 1);
		n = len;
		sk->k.base = sk->text;
	} else {
		/* Normalised, then read again so offsets point into it. */
		n = tsec__key_format(&sk->k, sk->text, sizeof(sk->text));
		if (tsec__key_parse(sk->text, n, root_ok, &sk->k, why, sizeof(why)))
			return tsec__seterr(err, TSEC_EKEY, "key", "invalid key: %s", why);
	}
	sk->tlen = n;
	memcpy(sk->segbuf, sk->text, n + 1);
	sk->n = sk->k.nseg;
	for (unsigned i = 0; i < sk->n; i++) {
		unsigned o = sk->k.off[i];
		sk->seg[i] = sk->segbuf + o;
		sk->segbuf[o + sk->k.len[i]] = '\0';
		if (!store_ok && sk->segbuf[o] == '.' &&
		    strncmp(sk->seg[i], TSEC__RESERVED, TSEC__RESERVED_LEN) == 0)
			return tsec__seterr(err, TSEC_EKEY, sk->text,
					    "invalid key: names starting with "
					    TSEC__RESERVED " belong to the store");
	}
	return 0;
}

int tsec__skey_parse(const char *key, bool root_ok, struct tsec__skey *sk,
		     struct tsec_error *err)
{
	return parse(key, root_ok, false, sk, err);
}

int tsec__skey_parse_any(const char *key, struct tsec__skey *sk, struct tsec_error *err)
{
	return parse(key, false, true, sk, err);
}

bool tsec__key_reserved(const char *key)
{
	return !strncmp(key, TSEC__RESERVED, TSEC__RESERVED_LEN);
}

bool tsec__key_uncached(const char *key)
{
	return tsec__key_reserved(key) && strncmp(key, TSEC__RESERVED "remote/",
						  TSEC__RESERVED_LEN + 7);
}

int tsec__list_none(const struct tsec__skey *sk, int kind, struct tsec_error *err)
{
	return kind == 1 ? tsec__seterr(err, TSEC_EINVAL, sk->text, "'%s' is a file, not a folder",
					sk->text)
			 : tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
}

int tsec__strlist_add(struct tsec_strlist *l, size_t *cap, const char *k, size_t n,
		      const char *suffix)
{
	char *s;

	if (l->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		char **v = realloc(l->v, nc * sizeof(*v));

		if (!v)
			return TSEC_ENOMEM;
		l->v = v;
		*cap = nc;
	}
	if (asprintf(&s, "%.*s%s", (int)n, k, suffix) < 0)
		return TSEC_ENOMEM;
	l->v[l->n++] = s;
	return 0;
}

bool tsec__is_cert_key(const struct tsec__skey *sk)
{
	return sk->k.kind == TSEC_KIND_CERT;
}

int tsec__values_begin(char **out, size_t *len, size_t n, struct tsec_error *err)
{
	if (n > TSEC__GET_MANY_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "", "more than %d keys at once",
				    TSEC__GET_MANY_MAX);
	for (size_t i = 0; i < n; i++) {
		out[i] = NULL;
		len[i] = 0;
	}
	return 0;
}

void tsec__values_free(char **out, size_t *len, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(out[i]);
		out[i] = NULL;
		len[i] = 0;
	}
}

void tsec_strlist_free(struct tsec_strlist *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}
