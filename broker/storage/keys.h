/*
 * Internal: storage keys as the store and every backend read them
 * (keys.c), below both: a key parsed and normalised once, the store's
 * reserved namespace, lists of keys and where a key lies.
 */
#ifndef TSEC_STORAGE_KEYS_H
#define TSEC_STORAGE_KEYS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tinysecurity/store.h"
#include "common/error.h"
#include "common/key.h"

#define TSEC__RESERVED ".tsec-"
#define TSEC__RESERVED_LEN 6

/*
 * A key read once: its normalised text (what the policy sees) and its
 * segments as C strings (what the store opens).
 */
struct tsec__skey {
	struct tsec__key k;
	char text[TSEC_KEY_MAX + 1];
	size_t tlen;                     /* strlen(text) */
	char segbuf[TSEC_KEY_MAX + 1];
	const char *seg[TSEC_KEY_SEGMENTS];
	unsigned n;
};

/* Groups of up to this many keys (a certificate's three files, a move's
 * two) are parsed into stack storage, not allocated. */
#define TSEC__SMALL_GROUP 4

/*
 * Parses key by the key rules (root allowed only with root_ok) and
 * refuses reserved ".tsec-" segments.  Returns 0 or TSEC_EKEY (err says
 * why, where = the key).
 */
int tsec__skey_parse(const char *key, bool root_ok, struct tsec__skey *sk,
		     struct tsec_error *err);
/* The same, ".tsec-" segments allowed: the store's own records, and keys
 * a backend reads back from its own data. */
int tsec__skey_parse_any(const char *key, struct tsec__skey *sk, struct tsec_error *err);
/* Whether key lies in the store's own namespace (first segment ".tsec-"). */
bool tsec__key_reserved(const char *key);
/*
 * Whether a LocalCache reads key from its backend every time: the store's
 * records, but for the remote store's generation records, which change
 * only with the references they go with and are cached as they are.
 */
bool tsec__key_uncached(const char *key);

/* Whether the key names a certificate (a .crt under certificates/). */
bool tsec__is_cert_key(const struct tsec__skey *sk);

/* What listing sk says when it is no folder, by its kind (1 a file, 0
 * nothing): TSEC_EINVAL "'KEY' is a file, not a folder" or TSEC_ENOENT
 * "KEY: not found", as the backend contract says (backend.h). */
int tsec__list_none(const struct tsec__skey *sk, int kind, struct tsec_error *err);

/* Appends "k[0..n)suffix" to l (capacity *cap, grown by doubling): 0 or
 * TSEC_ENOMEM. */
int tsec__strlist_add(struct tsec_strlist *l, size_t *cap, const char *k, size_t n,
		      const char *suffix);

/* Whether the parsed key lies below the folder (folder + "/"), from
 * their lengths. */
static inline bool tsec__skey_below(const struct tsec__skey *key, const struct tsec__skey *folder)
{
	return key->tlen > folder->tlen && key->text[folder->tlen] == '/' &&
	       !memcmp(key->text, folder->text, folder->tlen);
}

/*
 * A 64-bit hash of p[0..n), eight bytes a step (keys run 30-80 bytes; a
 * byte-at-a-time hash costs several times more).  Not for adversaries'
 * collisions: chains stay short because keys come from the key rules and
 * callers the policy allowed.
 */
static inline uint64_t tsec__strhash(const char *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w = 0;
	uint32_t a, b;

	if (n >= 8) {
		/* The last step reads the last eight bytes, overlapping the
		 * one before: no copy of a variable length (a call). */
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(&w, p + i, 8);
			h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
			h ^= h >> 31;
		}
		memcpy(&w, p + n - 8, 8);
	} else if (n >= 4) {
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		w = (uint64_t)a << 32 | b;
	} else if (n) {
		w = (uint64_t)(unsigned char)p[0] << 16 |
		    (uint64_t)(unsigned char)p[n / 2] << 8 | (unsigned char)p[n - 1];
	}
	h = (h ^ w) * 0x94d049bb133111ebull;
	h ^= h >> 29;
	return h ^ (h >> 32);
}

/* One write of a group: a parsed key and its value (borrowed). */
struct tsec__bput {
	const struct tsec__skey *sk;
	const void *value;
	size_t len;
};

/* Frees out[0..n) of a get_many and clears them and len[0..n). */
void tsec__values_free(char **out, size_t *len, size_t n);

/* The most keys one get_many (and tsec_store_exists_many) reads at once. */
#define TSEC__GET_MANY_MAX 8

#endif
