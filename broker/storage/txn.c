/*
 * The store's multi-key operations: move (one value, never replacing the
 * destination; the policy checks both ends) and put_many (a group of
 * writes that is restored whole if any write fails).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/storage/store_private.h"

int tsec_store_move(struct tsec_store *s, const struct tsec_principal *who,
		    const char *src, const char *dst, struct tsec_error *err)
{
	struct tsec__skey a, b;
	struct tsec_request r;
	char *data = NULL, tmp[64];
	size_t len;
	int sfd = -1, srcdir = -1, dstdir = -1, fd = -1, rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	if ((rc = tsec__skey_parse(src, false, &a, err)) ||
	    (rc = tsec__skey_parse(dst, false, &b, err)))
		return rc;
	tsec__req_for(&r, "storage.move", &a);
	r.ctx.has = TSEC_CTX_DEST;
	r.ctx.dest.ptr = b.text;
	r.ctx.dest.len = strlen(b.text);
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	if (strcmp(a.text, b.text) == 0)
		return tsec__seterr(err, TSEC_EEXIST, b.text, "source and destination are the same");
	if ((rc = tsec__open_dirs(s, &a, a.n - 1, false, &srcdir, err)))
		return rc;
	sfd = openat(srcdir, a.seg[a.n - 1], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0) {
		rc = tsec__io_err(err, a.text, "cannot open source");
		goto out;
	}
	if ((rc = tsec__read_fd(sfd, s->value_max, &data, &len, err, a.text))) {
		if (rc == TSEC_EINVAL)
			tsec__seterr(err, TSEC_EINVAL, a.text, "'%s' is a folder; only values move", a.text);
		goto out;
	}
	if ((rc = tsec__open_dirs(s, &b, b.n - 1, true, &dstdir, err)))
		goto out;
	/* Copy into a temporary file, then link it: link never replaces. */
	tsec__temp_name(tmp, sizeof(tmp), "tmp");
	fd = openat(dstdir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = tsec__io_err(err, b.text, "cannot create temporary file");
		goto out;
	}
	if (tsec__write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		rc = tsec__io_err(err, b.text, "cannot write");
		goto unlink_tmp;
	}
	if (linkat(dstdir, tmp, dstdir, b.seg[b.n - 1], 0) < 0) {
		rc = errno == EEXIST
			? tsec__seterr(err, TSEC_EEXIST, b.text, "'%s' exists; move never replaces", b.text)
			: tsec__io_err(err, b.text, "cannot link into place");
		goto unlink_tmp;
	}
	unlinkat(dstdir, tmp, 0);
	fsync(dstdir);
	if (unlinkat(srcdir, a.seg[a.n - 1], 0) < 0) {
		rc = tsec__io_err(err, a.text, "moved, but cannot remove the source");
		goto out;
	}
	fsync(srcdir);
	rc = 0;
	goto out;
unlink_tmp:
	unlinkat(dstdir, tmp, 0);
out:
	if (fd >= 0)
		close(fd);
	if (sfd >= 0)
		close(sfd);
	if (srcdir >= 0)
		close(srcdir);
	if (dstdir >= 0)
		close(dstdir);
	free(data);
	return rc;
}

/* State of one write of a transaction, for the rollback. */
struct txn_item {
	struct tsec__skey sk;
	int dirfd;
	int had_old;                 /* a backup link holds the old value */
	int written;
	char backup[64];
};

int tsec_store_put_many(struct tsec_store *s, const struct tsec_principal *who,
			const struct tsec_put *puts, size_t n,
			struct tsec_error *err)
{
	struct txn_item *it = NULL;
	struct tsec_request *r = NULL;
	size_t i;
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	if (n == 0)
		return 0;
	if (!puts)
		return tsec__seterr(err, TSEC_EINVAL, "", "no values");
	it = calloc(n, sizeof(*it));
	r = calloc(n, sizeof(*r));
	if (!it || !r) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	for (i = 0; i < n; i++)
		it[i].dirfd = -1;
	for (i = 0; i < n; i++) {
		if ((rc = tsec__skey_parse(puts[i].key, false, &it[i].sk, err)))
			goto out;
		if (puts[i].len > s->value_max) {
			rc = tsec__seterr(err, TSEC_ETOOBIG, it[i].sk.text,
					  "value larger than %zu bytes", s->value_max);
			goto out;
		}
		if (!puts[i].value && puts[i].len) {
			rc = tsec__seterr(err, TSEC_EINVAL, it[i].sk.text, "NULL value");
			goto out;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(it[j].sk.text, it[i].sk.text)) {
				rc = tsec__seterr(err, TSEC_EINVAL, it[i].sk.text,
						  "key written twice in one transaction");
				goto out;
			}
		tsec__req_for(&r[i], "storage.store", &it[i].sk);
		r[i].ctx.has = TSEC_CTX_SIZE;
		r[i].ctx.size = puts[i].len;
		if (tsec__is_cert_key(&it[i].sk) && puts[i].len) {
			/* The policy judges the certificate being stored. */
			r[i].ctx.has |= TSEC_CTX_CERT_PEM;
			r[i].ctx.cert_pem.ptr = puts[i].value;
			r[i].ctx.cert_pem.len = puts[i].len;
		}
	}
	if ((rc = tsec__store_check(s, who, r, n, err)))
		goto out;

	/* Keep the old values by hard links, then write each new one. */
	for (i = 0; i < n; i++) {
		struct txn_item *t = &it[i];
		const char *leaf = t->sk.seg[t->sk.n - 1];
		struct stat sb;

		if ((rc = tsec__open_dirs(s, &t->sk, t->sk.n - 1, true, &t->dirfd, err)))
			goto rollback;
		if (n > 1 && fstatat(t->dirfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(sb.st_mode)) {
			tsec__temp_name(t->backup, sizeof(t->backup), "bak");
			if (linkat(t->dirfd, leaf, t->dirfd, t->backup, 0) < 0) {
				rc = tsec__io_err(err, t->sk.text, "cannot keep the old value");
				goto rollback;
			}
			t->had_old = 1;
		}
		if ((rc = tsec__write_atomic(t->dirfd, leaf, puts[i].value, puts[i].len,
					      true, err)))
			goto rollback;
		t->written = 1;
	}
	for (i = 0; i < n; i++)
		if (it[i].had_old)
			unlinkat(it[i].dirfd, it[i].backup, 0);
	rc = 0;
	goto out;
rollback:
	for (i = 0; i < n; i++) {
		struct txn_item *t = &it[i];
		const char *leaf = t->sk.seg[t->sk.n - 1];
		if (t->dirfd < 0)
			continue;
		if (t->had_old)
			renameat(t->dirfd, t->backup, t->dirfd, leaf);
		else if (t->written)
			unlinkat(t->dirfd, leaf, 0);
		fsync(t->dirfd);
	}
out:
	for (i = 0; it && i < n; i++)
		if (it[i].dirfd >= 0)
			close(it[i].dirfd);
	free(it);
	free(r);
	return rc;
}

