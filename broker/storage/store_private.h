/* Internal: what the store and the locks share. */
#ifndef TSEC_STORE_PRIVATE_H
#define TSEC_STORE_PRIVATE_H

#include "tinysecurity/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/key.h"

#define TSEC__RESERVED ".tsec-"
#define TSEC__RESERVED_LEN 6

struct tsec_store {
	int rootfd;                      /* O_DIRECTORY, never closed early */
	struct tsec_bus *bus;
	char endpoint[TSEC_ENDPOINT_NAME_MAX];
	size_t value_max;
	tsec_store_observer_fn observer;
	void *observer_ctx;
};

/*
 * A key read once: its normalised text (what the policy sees) and its
 * segments as C strings (what the store opens).
 */
struct tsec__skey {
	struct tsec__key k;
	char text[TSEC_KEY_MAX + 1];
	char segbuf[TSEC_KEY_MAX + 1];
	const char *seg[TSEC_KEY_SEGMENTS];
	unsigned n;
};

/*
 * Parses key by the key rules (root allowed only with root_ok) and
 * refuses reserved ".tsec-" segments.  Returns 0 or TSEC_EKEY (err says
 * why, where = the key).
 */
int tsec__skey_parse(const char *key, bool root_ok, struct tsec__skey *sk,
		     struct tsec_error *err);

/*
 * Checks n requests through the store's endpoint, with `who` filled in as
 * principal of each.  Returns 0 when every request is allowed, else
 * TSEC_EDENIED with the first denied request's reason in err, or the
 * bus's error.
 */
int tsec__store_check(struct tsec_store *s, const struct tsec_principal *who,
		      struct tsec_request *reqs, size_t n,
		      struct tsec_error *err);

/*
 * Opens the folders seg[0..upto) below the root, never following a
 * symbolic link, creating missing ones (0700) when `create`.  *dirfd is
 * a new descriptor.  Errors: TSEC_ENOENT, TSEC_EEXIST (a file stands
 * where a folder must), TSEC_EIO.
 */
int tsec__open_dirs(struct tsec_store *s, const struct tsec__skey *sk,
		    unsigned upto, bool create, int *dirfd,
		    struct tsec_error *err);

/*
 * Writes data atomically as `leaf` in dirfd: a temporary file created
 * exclusively with mode 0600, then renamed over leaf; when `durable`, the
 * file is fsynced before the rename and the folder after it.  Refuses to
 * replace a folder (TSEC_EEXIST).  On failure leaves no temporary file
 * and the old value intact.
 */
int tsec__write_atomic(int dirfd, const char *leaf, const void *data,
		       size_t len, bool durable, struct tsec_error *err);

/*
 * Opens the key's path below the root in one openat2 call that the
 * kernel keeps beneath the root and off every symbolic link (O_NOFOLLOW
 * plus RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS).  Returns the descriptor,
 * or -1 with errno (ENOSYS where the kernel has no openat2).
 */
int tsec__open_beneath(struct tsec_store *s, const struct tsec__skey *sk,
		       int flags);

/* An I/O error from errno: TSEC_ENOENT for ENOENT, else TSEC_EIO. */
int tsec__io_err(struct tsec_error *err, const char *where, const char *what);

/* Fills *r with one request: action on the key sk (borrowed). */
void tsec__req_for(struct tsec_request *r, const char *action,
		   const struct tsec__skey *sk);

/* Whether the key names a certificate (a .crt under certificates/). */
bool tsec__is_cert_key(const struct tsec__skey *sk);

/* Writes all of data to fd, retrying short writes.  0 or -1 (errno). */
int tsec__write_all(int fd, const void *data, size_t len);

/* Reads at most max bytes of an open file into a new NUL-ended buffer. */
int tsec__read_fd(int fd, size_t max, char **out, size_t *len,
		  struct tsec_error *err, const char *where);

/* Opens the value at sk for reading (after the check). */
int tsec__open_value(struct tsec_store *s, const struct tsec__skey *sk,
		     int *fdp, struct tsec_error *err);

/* Fills buf with ".tsec-<what>-" and 16 random hex digits. */
void tsec__temp_name(char *buf, size_t n, const char *what);


#endif
