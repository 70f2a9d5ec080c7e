/*
 * The remote certificate store: a certificate, its private key and its
 * metadata kept as immutable, content-addressed blobs in an object store
 * (a folder, S3 or a compatible server), with three small references in
 * the coordinator (any tsec_store: file, etcd, redis, with or without a
 * LocalCache) saying which blobs are current.
 *
 *   blob:      written once under an address derived from its content
 *              with a keyed hash (equal private keys do not show as equal
 *              addresses to whoever lacks the key); a private key is
 *              sealed (XChaCha20-Poly1305) before it leaves the process.
 *              Never overwritten; a blob that does not verify against its
 *              address is an error, never served.
 *   reference: certificates/<issuer>/<d>/<d>.{crt,key,json}, the keys of
 *              tsec_store_save_cert, each naming one blob, authenticated
 *              with a key the store holds and bound to where it was
 *              written: one written by hand, copied from another
 *              certificate or altered is refused.  The three change
 *              together, with the certificate's generation record (a key
 *              no caller can name), in one coordinator transaction made
 *              only over the record the publish read, fenced by the
 *              renewal lock when one is given; an older set put back is
 *              refused.  The policy decides on these logical keys with
 *              the cert.* actions.
 *
 * A publish writes the blobs that are missing, then switches the three
 * references; one that dies between the two leaves only unreferenced
 * blobs, which the sweeper collects after a grace period.
 */
#ifndef TINYSECURITY_REMOTE_H
#define TINYSECURITY_REMOTE_H

#include "tinysecurity/store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tsec_remote;

/* The on-store format this library writes (references and blobs). */
#define TSEC_REMOTE_FORMAT 2
/* Largest blob (a certificate chain, a key, its metadata), by default. */
#define TSEC_REMOTE_BLOB_MAX (1u << 20)

struct tsec_remote_opts {
	/* sizeof(struct tsec_remote_opts) the caller was built with, or 0 for
	 * TSEC_REMOTE_OPTS_MIN_SIZE (this struct's first size): see TSEC_OPTS_HAS. */
	size_t size;
	/*
	 * Where the blobs live:
	 *   "file:/path"                  a folder (shared storage)
	 *   "s3://bucket[/prefix]"        an S3-compatible object store, with
	 *                                 s3_endpoint, s3_region and keys
	 *   "memory:"                     this process only (tests, benchmarks)
	 */
	const char *blobs;
	const char *s3_endpoint;     /* "https://s3.eu-west-1.amazonaws.com" or
					"http://127.0.0.1:4568"; "" for AWS in
					s3_region */
	const char *s3_region;       /* default "us-east-1" */
	const char *s3_access_key;
	const char *s3_secret_file;  /* a file holding the secret key, 0600 */
	bool s3_virtual_host;        /* bucket.host addressing; default path
					style (host/bucket) */
	const char *s3_ca_file;      /* TLS: a CA bundle other than the system's */
	/*
	 * The key file (32 raw bytes or 64 hex digits, mode 0600) from which
	 * the address key and the sealing key are derived.  Required: without
	 * it an address would be a plain hash of a private key.
	 */
	const char *key_file;
	bool plain_keys;             /* true: private keys are stored unsealed
					(their addresses are still keyed) */
	size_t blob_max;             /* 0: TSEC_REMOTE_BLOB_MAX */
	size_t txn_max;              /* the bound on what one publish keeps to
					undo itself (the blobs it writes and
					the references it replaces); a publish
					over it is TSEC_ETOOBIG before anything
					changes.  0: 4 * blob_max */
	uint32_t timeout_ms;         /* one object-store request (default 10000) */
};

/* The first size of struct tsec_remote_opts (what size 0 stands for). */
#define TSEC_REMOTE_OPTS_MIN_SIZE \
	(offsetof(struct tsec_remote_opts, timeout_ms) + sizeof(((struct tsec_remote_opts *)0)->timeout_ms))

/*
 * Opens the remote store over coordinator (which it uses, never closes:
 * close the remote first).  Returns 0 or a TSEC_E* code with err filled.
 * A blob store belongs to one coordinator (the first to publish or sweep
 * there claims it): a publish or a sweep over a blob store another
 * coordinator claimed is refused (TSEC_EINVAL), since each one's sweeps
 * would remove the other's live blobs.
 */
TSEC_API int tsec_remote_open(struct tsec_remote **out, struct tsec_store *coordinator,
			      const struct tsec_remote_opts *o, struct tsec_error *err);
/* Closes it; sets *r to NULL.  Accepts NULL. */
TSEC_API void tsec_remote_close(struct tsec_remote **r);

/* What a publish did. */
enum tsec_remote_outcome {
	TSEC_REMOTE_PUBLISHED = 1,   /* the references now name the new blobs */
	TSEC_REMOTE_UNCHANGED = 2,   /* the same content was already current */
};

/*
 * Publishes a certificate (the policy's cert.publish on its three keys,
 * judging the certificate): writes its blobs where missing (one already
 * there that does not verify as this content is replaced), then switches
 * the three references in one coordinator transaction, made only while
 * lk is held with its token and fence when lk is given (TSEC_ENOTOWNER
 * otherwise, and no reference changes), and only over the state this
 * publish read: TSEC_ECHANGED when another publish of other content
 * switched first (nothing of this one stays).  Publishing the content
 * that is already current changes nothing but blobs lost or altered in
 * the object store, which it writes again.  *outcome (may be NULL) says
 * which.
 */
TSEC_API int tsec_remote_publish(struct tsec_remote *r, const struct tsec_principal *who,
				 const struct tsec_lock *lk, const char *issuer,
				 const char *domain, const struct tsec_cert_files *f,
				 enum tsec_remote_outcome *outcome, struct tsec_error *err);

/*
 * Loads a certificate (cert.load): the three references and the
 * certificate's record read as of one moment, each verified, then each
 * blob, verified against its address as this certificate's.  0 with all
 * three; TSEC_ENOENT when none exists; TSEC_EINCOMPLETE when only some
 * are live (an archived key); TSEC_ECORRUPT when a reference does not
 * verify where it sits, or a blob does not verify or is missing;
 * TSEC_EROLLBACK when the references are an older set than the record
 * names, or the record is older than one this process has seen.
 */
TSEC_API int tsec_remote_load(struct tsec_remote *r, const struct tsec_principal *who,
			      const char *issuer, const char *domain,
			      struct tsec_cert_files *f, struct tsec_error *err);

/* Whether the certificate exists whole, as tsec_remote_load would find
 * it: its reference verified and live, and its record saying all three
 * references are (after an archive of its key: no).  cert.exists; exact;
 * no blob is read. */
TSEC_API int tsec_remote_exists(struct tsec_remote *r, const struct tsec_principal *who,
				const char *issuer, const char *domain, int *exists,
				struct tsec_error *err);

/*
 * Archives the private key (cert.archive, from its key to the archive
 * key): writes its reference, bound to the new place, at
 * certificates/<issuer>/<d>/archive/<name>.key and takes the key out of
 * the live set, in one transaction (TSEC_EEXIST when that name is taken;
 * nothing changes).  Only the principal that published the key may load
 * it again (tsec_remote_load_archived).
 */
TSEC_API int tsec_remote_archive_key(struct tsec_remote *r, const struct tsec_principal *who,
				     const struct tsec_lock *lk, const char *issuer,
				     const char *domain, const char *name,
				     struct tsec_error *err);
/* An archived key's PEM (*out, free() it); TSEC_EDENIED for another
 * principal than the one who archived it. */
TSEC_API int tsec_remote_load_archived(struct tsec_remote *r, const struct tsec_principal *who,
				       const char *issuer, const char *domain,
				       const char *name, char **out, size_t *len,
				       struct tsec_error *err);

/* What this store has refused or mended since it opened. */
struct tsec_remote_stats {
	uint64_t refused;            /* references or records that did not
					verify (forged, copied, altered) */
	uint64_t rollbacks;          /* older references or records refused */
	uint64_t corrupt;            /* blobs that did not verify */
	uint64_t repaired;           /* blobs a publish wrote again over bad ones */
	uint64_t conflicts;          /* publishes another publish beat */
};

/* Fills *out (zeros for NULL r).  Thread-safe. */
TSEC_API void tsec_remote_stats(struct tsec_remote *r, struct tsec_remote_stats *out);

/* What a sweep did. */
struct tsec_remote_sweep {
	size_t blobs;                /* blobs seen */
	size_t referenced;           /* of which referenced */
	size_t waiting;              /* unreferenced, within their grace */
	size_t removed;              /* unreferenced for longer: removed */
	size_t failed;               /* due for removal, but the store refused */
	size_t litter;               /* temporaries of writers gone, removed */
};

/*
 * Collects unreferenced blobs: one is removed only once sweeps have seen
 * it unreferenced for grace_ms of the wall clock, so a reader that read a
 * reference before it was switched, or a publisher between its blobs and
 * its references, still finds the blob.  When a blob was first seen
 * unreferenced is kept in the coordinator, so the grace holds across
 * sweeps of any broker and across restarts: run a sweep now and then
 * (hourly, say); the first that sees a blob unreferenced starts its
 * grace.  Also removes what publishers killed mid-write left.  Reads the
 * references as the internal sweeper (no principal).  TSEC_EIO when a
 * blob due could not be removed (*out counts them); TSEC_EINVAL when
 * the blob store belongs to another coordinator.
 */
TSEC_API int tsec_remote_sweep(struct tsec_remote *r, uint64_t grace_ms,
			       struct tsec_remote_sweep *out, struct tsec_error *err);

/*
 * Accepts a coordinator restored from a backup (or a failover that lost
 * writes) for one certificate: its generation record went back, so
 * every broker that saw a later one refuses it (TSEC_EROLLBACK), loads
 * and publishes alike.  The record there now is verified (its MAC, and
 * the references it names) and written again with its sequence moved
 * past the highest this process has seen by TSEC_REMOTE_RECOVER_GAP, so
 * that every broker accepts it; the certificate served is the restored
 * one until the next publish.  An operator's act: tsec-broker lets only
 * admin callers ask (`tsec cert recover`), and logs it.  *was and *now:
 * the sequence before and after.  TSEC_ENOENT without a record,
 * TSEC_ECORRUPT or TSEC_EROLLBACK when the state is not one this store
 * wrote, TSEC_ECHANGED when a publish landed meanwhile.
 */
#define TSEC_REMOTE_RECOVER_GAP (1ull << 20)
TSEC_API int tsec_remote_recover(struct tsec_remote *r, const char *issuer, const char *domain,
				 uint64_t *was, uint64_t *now, struct tsec_error *err);

/*
 * Asks the blob store whether it answers and takes this store's
 * credentials (one small request): 0, or the error a publish would meet
 * (TSEC_EAUTH: it refuses them).  For health checks.
 */
TSEC_API int tsec_remote_probe(struct tsec_remote *r, struct tsec_error *err);

#ifdef __cplusplus
}
#endif

#endif
