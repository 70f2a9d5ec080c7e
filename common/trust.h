/* Internal: opening a path the broker was given, checked as written (see
 * common/trust.c). */
#ifndef TSEC_COMMON_TRUST_H
#define TSEC_COMMON_TRUST_H

#include <stdbool.h>
#include <sys/types.h>

#include "tinysecurity/types.h"

/* What the path must name, and what is asked of it. */
enum tsec__trust_kind {
	/* A folder the broker keeps its own files in: the broker user's
	 * (or root's), writable by nobody else. */
	TSEC__TRUST_FOLDER,
	/* A key or secret: a regular file with one link, the broker user's
	 * (or root's), readable and writable by nobody else. */
	TSEC__TRUST_SECRET,
	/* A file others may read but must not change (a CA bundle, a public
	 * key, a policy, a module): the broker user's or root's, writable
	 * by nobody else. */
	TSEC__TRUST_FILE,
};

#define TSEC__TRUST_DEPTH 64

/* An opened path: its descriptor and the folders it was reached through. */
struct tsec__trusted {
	int fd;                       /* O_CLOEXEC; the caller closes it */
	dev_t dev;
	ino_t ino;
	unsigned ndirs;               /* the folders it is in, outermost first */
	struct {
		dev_t dev;
		ino_t ino;
	} dir[TSEC__TRUST_DEPTH];
};

/*
 * Opens path (role names it in errors: "the store's root", "the remote
 * key file") after checking every component as written, as sshd's
 * StrictModes judges a home folder: every folder on the way is the
 * broker user's or root's, and writable by others only with the sticky
 * bit (as /tmp); every symbolic link on the way is the broker user's or
 * root's and is followed by the same rules (at most 40); the last
 * component is what `kind` asks.  Each component is opened beneath the
 * descriptor of the folder checked before it, without following links,
 * and judged by fstat of what was opened, so nothing can be swapped
 * between the check and the use.  With `create`, a missing last folder
 * is made (0700).  0 with t filled, or TSEC_ENOENT / TSEC_EIO /
 * TSEC_EINVAL with why in err.
 */
int tsec__trusted_open(const char *path, enum tsec__trust_kind kind, bool create,
		       const char *role, struct tsec__trusted *t, struct tsec_error *err);

/* Whether the folder (dev, ino) is one of those t was reached through. */
bool tsec__trusted_within(const struct tsec__trusted *t, dev_t dev, ino_t ino);

/*
 * The folders of this process whose contents callers may read or the
 * broker may delete (a file store's root, a blob folder): a key or
 * secret file inside one is refused by tsec__trusted_open (issue 49: a
 * remote key file inside the storage root was read back through
 * storage.load).  Each open one is registered with what it is and its
 * path; unregistered when closed.  At most 32 at once; beyond that a
 * registration fails (-1) and the opener refuses.
 */
/*
 * Refuses path (checked as tsec__trusted_open does with kind) when it is
 * reached through a fenced folder: for secrets read before the stores
 * that fence were open (the configuration holding the broker's own key,
 * a TLS key).  0, or the error with why.
 */
int tsec__trusted_outside(const char *path, enum tsec__trust_kind kind, const char *role,
			  struct tsec_error *err);

int tsec__trusted_fence_add(dev_t dev, ino_t ino, const char *role, const char *path);
void tsec__trusted_fence_drop(dev_t dev, ino_t ino);

#endif
