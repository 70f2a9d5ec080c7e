/*
 * Internal: what the layers above storage may call (the daemon, the
 * remote certificate store), and nothing of the store's inside: struct
 * tsec_store stays opaque here, and no backend is handed out (issue 53,
 * item 2).  Storage's own files include store_private.h, which adds the
 * struct and what only they share.
 */
#ifndef TSEC_STORE_ABOVE_H
#define TSEC_STORE_ABOVE_H

#include "tinysecurity/store.h"
#include "common/error.h"
#include "broker/storage/keys.h"

/*
 * tsec_store_get answered only from the store's LocalCache, for a
 * caller that must not wait (tsec-broker's loop): 1 when the cache does
 * not hold the key now or the store has none (nothing checked, nothing
 * read: ask tsec_store_get), else what tsec_store_get answers, the
 * policy asked as it asks.
 */
int tsec__store_get_hit(struct tsec_store *s, const struct tsec_principal *who, const char *key,
			char **out, size_t *len, struct tsec_error *err);
/* The same for tsec_store_exists: 0 (a value there), 1 (ask
 * tsec_store_exists: the cache cannot say "absent"), or the refusal. */
int tsec__store_exists_hit(struct tsec_store *s, const struct tsec_principal *who,
			   const char *key, struct tsec_error *err);

/*
 * A certificate's three key names (as tsec_cert_keys), not read by the
 * key rules: each has exactly four segments or is refused when parsed
 * (an issuer or domain of "." or ".." is refused here).  For callers that
 * parse the names next.
 */
int tsec__cert_names(const char *issuer, const char *domain, char *crt,
		     char *key, char *meta, size_t n);

/*
 * Checks n requests through the store's endpoint, with `who` filled in as
 * principal of each.  Returns 0 when every request is allowed, else
 * TSEC_EDENIED with the first denied request's reason in err, or the
 * bus's error.
 */
int tsec__store_check(struct tsec_store *s, const struct tsec_principal *who,
		      struct tsec_request *reqs, size_t n,
		      struct tsec_error *err);

/* Fills *r with one request: action on the key sk (borrowed). */
void tsec__req_for(struct tsec_request *r, const char *action,
		   const struct tsec__skey *sk);

/*
 * The store's own records (records.c): the fleet's signed policy bundle,
 * kept as an ordinary value under the reserved key ".tsec-fleet/<name>",
 * which no caller's key can name, so every backend keeps it with the
 * promises it keeps for values, and no backend needs an operation of its
 * own for it.  TSEC_ENOENT when absent.  Never cached by a LocalCache:
 * a record is read from the backend every time.
 */
int tsec__store_record_get(struct tsec_store *s, const char *name, char **out, size_t *len,
			   struct tsec_error *err);
/* The names of the records there are (none: an empty list). */
int tsec__store_record_names(struct tsec_store *s, struct tsec_strlist *out,
			     struct tsec_error *err);
int tsec__store_record_put(struct tsec_store *s, const char *name, const char *val,
			   size_t len, struct tsec_error *err);
/* The same, only while the record is still old[0..oldlen) (absent when
 * old is NULL): a write guarded by the old value (the store's one
 * compare-and-swap, tsec__store_put_checked's); TSEC_EBUSY when it
 * changed. */
int tsec__store_record_cas(struct tsec_store *s, const char *name, const char *old,
			   size_t oldlen, const char *val, size_t len, struct tsec_error *err);

/*
 * A record of the store's own (a key under ".tsec-", which no caller
 * names) written with a group: value[0..len), only while the record
 * still holds old[0..oldlen) (old NULL: while it is absent).
 */
struct tsec__guarded {
	const char *key;
	const void *value;
	size_t len;
	const void *old;
	size_t oldlen;
};

/*
 * tsec_store_put_many (or _fenced when lk is given) without asking the
 * policy: for a caller that has asked it already, about what the write
 * stands for (the remote store writes references after asking about the
 * certificate they name, before any blob is written), so each decision
 * is made and logged once.  With rec, the record goes in the same group,
 * guarded: TSEC_ECHANGED, and nothing written, when it no longer holds
 * what rec->old says.
 */
int tsec__store_put_checked(struct tsec_store *s, const struct tsec_lock *lk,
			    const struct tsec_put *puts, size_t n,
			    const struct tsec__guarded *rec, struct tsec_error *err);

/*
 * The backend's own calls, for a layer that asked the policy already
 * about what they stand for (raw.c): no policy asked, no gate taken,
 * each with the backend's promises (backend.h): get, get_many (as of one
 * moment), kind (0 nothing, 1 a value, 2 a folder), list, put_many (one
 * group, unfenced, unguarded) and del (one value).
 */
int tsec__store_raw_get(struct tsec_store *s, const struct tsec__skey *k, size_t max,
			char **out, size_t *len, struct tsec_error *err);
int tsec__store_raw_get_many(struct tsec_store *s, const struct tsec__skey *k, size_t n,
			     size_t max, char **out, size_t *len, struct tsec_error *err);
int tsec__store_raw_kind(struct tsec_store *s, const struct tsec__skey *k, int *kind,
			 struct tsec_error *err);
int tsec__store_raw_list(struct tsec_store *s, const struct tsec__skey *prefix, int recursive,
			 struct tsec_strlist *out, struct tsec_error *err);
int tsec__store_raw_put_many(struct tsec_store *s, const struct tsec__bput *p, size_t n,
			     struct tsec_error *err);
int tsec__store_raw_del(struct tsec_store *s, const struct tsec__skey *k,
			struct tsec_error *err);

#endif
