/*
 * Internal to the remote certificate store (broker/remote/): the store's
 * state, shared by its files, each one job:
 *
 *   remote.c        open, close, the providers' registry, statistics
 *   remote_blob.c   blob addresses, sealing and verification
 *   remote_ref.c    references and generation records: text, MAC, parsing
 *   remote_cert.c   publish, load, presence and archival
 *   remote_sweep.c  the sweeper
 *
 * Formats (TSEC_REMOTE_FORMAT 2; tests/data/remote-v2 holds a fixture
 * every later version must load):
 *
 *   blob name  <kind>/<hex>, kind crt, key or meta; hex the keyed
 *              BLAKE2b-256 (address key) of "tsec-blob\0", the format,
 *              the kind, the certificate ("<issuer>/<domain>") and the
 *              plaintext: a blob belongs to one certificate.
 *   blob       "TSB2", one flag byte, then
 *                flag 0: the plaintext;
 *                flag 1: a 24-byte nonce and the plaintext sealed with
 *                XChaCha20-Poly1305 under the sealing key, with the blob
 *                name and the certificate as associated data (a sealed
 *                key opens only as that certificate's).  The nonce is a
 *                keyed hash of the name and the plaintext (a third key):
 *                sealing is deterministic, a blob's bytes follow from
 *                its name.
 *   reference  at certificates/<issuer>/<d>/<d>.{crt,key,json}:
 *              {"tsec_ref":2,"gen":G,"id":"<32 hex>","blob":"<name>",
 *               "size":N,"by":"<principal>","mac":"<64 hex>"}.
 *              The MAC (keyed BLAKE2b-256, reference key) covers the key
 *              path it was written at, the blob name and size, G, id and
 *              by: a reference is valid only where this store wrote it,
 *              for that certificate.  G and id name one publish.
 *   record     at .tsec-remote/<issuer>/<d> (a key no caller can name):
 *              {"tsec_gen":2,"seq":S,"gen":G,"id":"<32 hex>","parts":P,
 *               "mac":"<64 hex>"}: the certificate's current publish
 *              (G, id), which of its three references are live (P, bits
 *              1 crt, 2 key, 4 meta: an archived key is not), and S,
 *              raised by every change.  Written in the same guarded
 *              transaction as the references, so an older set put back
 *              no longer matches it.
 *
 * Keys: crypto_kdf from the key file, context "tsecblob": 1 address,
 * 2 seal, 3 nonce, 4 reference MAC.
 *
 * Format 1 (no MAC, no record, blobs bound to nothing) was never in a
 * release; its references are refused as unauthenticated.
 */
#ifndef TSEC_REMOTE_PRIVATE_H
#define TSEC_REMOTE_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <sodium.h>

#include "broker/remote/blobs.h"
#include "broker/storage/store_above.h"

#define TSEC__RK 3                   /* kinds: crt, key, meta */
#define TSEC__RID_HEX 32
#define TSEC__RMAC_HEX 64
#define TSEC__RBY_MAX 256            /* a publishing principal's id */
#define TSEC__RREF_MAX 1024          /* a reference's or record's text */
#define TSEC__RBLOB_HDR 5
#define TSEC__RSEAL_OVERHEAD (crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + \
			      crypto_aead_xchacha20poly1305_ietf_ABYTES)
#define TSEC__RECORDS TSEC__RESERVED "remote"
#define TSEC__PARTS_ALL 7u

extern const char *const tsec__rkind[TSEC__RK];

/* Where the high-water marks of records seen are kept (remote_cert.c). */
struct tsec__hw {
	uint64_t h;                  /* hash of the record's key; 0: empty */
	uint64_t seq;
	uint64_t epoch;              /* hw_epoch when seq was raised */
};

struct tsec_remote {
	struct tsec_store *coord;
	struct tsec__blobs *blobs;
	uint8_t k_addr[32], k_seal[32], k_nonce[32], k_ref[32];
	/* BLAKE2b keyed once with k_addr, k_nonce and k_ref: each hash
	 * starts from a copy (the key's block is not hashed again). */
	crypto_generichash_state st_addr, st_nonce, st_ref;
	bool seal_keys;
	size_t blob_max, txn_max;
	pthread_mutex_t sweep_mu;    /* one sweep at a time (remote_sweep.c) */
	/* The highest record sequence seen per certificate, so a record that
	 * goes back (a coordinator restored, a failover that lost writes)
	 * is refused by this process (remote_cert.c). */
	pthread_mutex_t hw_mu;
	struct tsec__hw *hw;
	size_t hw_cap, hw_n;
	atomic_ullong hw_epoch;      /* raised with every mark raised */
	char where[256];             /* o->blobs, for messages */
	atomic_bool claimed;         /* the blob store is known to be ours */
	pthread_mutex_t claim_mu;    /* one claim at a time: the first publishes */
	/* tsec_remote_stats. */
	atomic_ullong n_refused, n_rollback, n_corrupt, n_repaired, n_conflict;
};

/* ---- remote.c ---- */

/*
 * Makes sure the blob store belongs to this coordinator: the
 * coordinator's id (made the first time) is claimed in the blob store,
 * or found there.  TSEC_EINVAL when another coordinator's id is there,
 * or when none is but the store holds blobs and this coordinator has no
 * record of claiming it (issue 49, item 4: with the claim removed,
 * another coordinator took the store and swept the first one's live
 * blobs).  Once per process, or every time with `again` (a sweep, which
 * removes blobs, looks each time).
 */
int tsec__remote_claim(struct tsec_remote *r, bool again, struct tsec_error *err);

/* ---- remote_hw.c ---- */

/*
 * Whether seq, read by a read that began at hw_epoch `since`, is below
 * the highest this process had seen for the record key when that read
 * began (1: the record went back).  With `raise`, remembers seq when it
 * is higher.
 */
int tsec__hw_seen(struct tsec_remote *r, const char *key, uint64_t seq, uint64_t since,
		  bool raise);
/* The highest sequence this process has seen for key (0: none). */
uint64_t tsec__hw_get(struct tsec_remote *r, const char *key);

/* ---- remote_blob.c ---- */

/* The certificate a blob belongs to: "<issuer>/<domain>". */
struct tsec__rbind {
	char text[TSEC_KEY_MAX];
	size_t len;
};

int tsec__rbind_of(const char *issuer, const char *domain, struct tsec__rbind *b,
		   struct tsec_error *err);

/* The address of data of kind for certificate b. */
void tsec__rblob_address(const struct tsec_remote *r, int kind, const struct tsec__rbind *b,
			 const void *data, size_t len, char name[TSEC__BLOB_NAME_MAX + 1]);

/* The blob's bytes (*out new; sealed for a key unless plain_keys). */
int tsec__rblob_encode(const struct tsec_remote *r, int kind, const struct tsec__rbind *b,
		       const char *name, const void *data, size_t len, uint8_t **out,
		       size_t *outlen, struct tsec_error *err);

/*
 * Fetches blob name of certificate b and verifies it against its address:
 * *out new (NUL-terminated), or TSEC_ENOENT (absent) or TSEC_ECORRUPT
 * (it does not open, or is another's), counted.
 */
int tsec__rblob_fetch(struct tsec_remote *r, const char *name, const struct tsec__rbind *b,
		      char **out, size_t *len, struct tsec_error *err);

/*
 * Makes blob name hold enc[0..n) (the bytes tsec__rblob_encode made for
 * it): written where absent (*made true); one there already is kept when
 * it is these bytes, and replaced when it is not (altered, truncated,
 * another's: counted as corrupt and repaired).
 */
int tsec__rblob_ensure(struct tsec_remote *r, const char *name, const uint8_t *enc, size_t n,
		       bool *made, struct tsec_error *err);

/* ---- remote_ref.c ---- */

struct tsec__ref {
	uint64_t gen;
	char id[TSEC__RID_HEX + 1];
	char blob[TSEC__BLOB_NAME_MAX + 1];
	uint64_t size;
	char by[TSEC__RBY_MAX + 1];
	char mac[TSEC__RMAC_HEX + 1];
};

struct tsec__rrec {
	uint64_t seq, gen;
	char id[TSEC__RID_HEX + 1];
	unsigned parts;
	char mac[TSEC__RMAC_HEX + 1];
};

/* A reference's text for place (the key it is written at), MAC'd; new. */
char *tsec__ref_text(const struct tsec_remote *r, const char *place, struct tsec__ref *ref);
/*
 * Reads a reference of kind from text and verifies it was written at
 * place by this store: TSEC_ECORRUPT (counted, with why) for a format-1
 * reference, one of a later format, a malformed one or one whose MAC
 * does not verify there.
 */
int tsec__ref_read(struct tsec_remote *r, const char *text, size_t len, int kind,
		   const char *place, struct tsec__ref *out, struct tsec_error *err);
/* The blob name a reference names, unverified (the sweeper keeps every
 * blob anything names); 0 or -1. */
int tsec__ref_blob(const char *text, size_t len, char name[TSEC__BLOB_NAME_MAX + 1]);

/* A record's text for its key, MAC'd; new. */
char *tsec__rrec_text(const struct tsec_remote *r, const char *key, struct tsec__rrec *rec);
int tsec__rrec_read(struct tsec_remote *r, const char *text, size_t len, const char *key,
		    struct tsec__rrec *out, struct tsec_error *err);

/* ---- remote_sweep.c ---- */

/* Puts back blobs that were removed while something references them. */
void tsec__rsweep_restore(struct tsec_remote *r, char (*names)[TSEC__BLOB_NAME_MAX + 1],
			  uint8_t **bytes, size_t *lens, size_t n);
void tsec__rsweep_free(struct tsec_remote *r);

/* ---- for tests ---- */

/* Called by a publish after its blobs are written and before the
 * references switch (a test kills the process there).  NULL in programs. */
extern void (*tsec__remote_after_blobs_hook)(void);

/* The store's blob provider (to plant, alter and count blobs). */
struct tsec__blobs *tsec__remote_blobs(struct tsec_remote *r);

/* Forgets the records this process has seen (a broker restarted). */
void tsec__remote_forget_seen(struct tsec_remote *r);

/*
 * For the fuzzer: 0 when the fast reference reader, where it accepts
 * text, reads what jansson reads from it; -1 when they differ.
 */
int tsec__remote_ref_agree(const char *text, size_t len);

#endif
