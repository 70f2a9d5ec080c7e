/*
 * Gated file storage: every call is checked through the bus before the
 * disk is touched; paths are walked one folder at a time from a held
 * root descriptor with O_NOFOLLOW, so no key (and no link planted in the
 * tree) reaches outside the root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/openat2.h>
#include <sodium.h>

#include "broker/storage/store_private.h"

#define S(lit) ((struct tsec_str){ lit, sizeof(lit) - 1 })

void tsec__temp_name(char *buf, size_t n, const char *what)
{
	unsigned char r[8];
	char hex[17];

	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
	snprintf(buf, n, TSEC__RESERVED "%s-%s", what, hex);
}

int tsec__io_err(struct tsec_error *err, const char *where, const char *what)
{
	int e = errno;
	return tsec__seterr(err, e == ENOENT ? TSEC_ENOENT : TSEC_EIO, where,
			    "%s: %s", what, strerror(e));
}

int tsec__skey_parse(const char *key, bool root_ok, struct tsec__skey *sk,
		     struct tsec_error *err)
{
	char why[96];
	size_t len;

	if (!key)
		return tsec__seterr(err, TSEC_EKEY, "", "NULL key");
	len = strlen(key);
	if (tsec__key_parse(key, len, root_ok, &sk->k, why, sizeof(why)))
		return tsec__seterr(err, TSEC_EKEY, "key", "invalid key: %s", why);
	tsec__key_format(&sk->k, sk->text, sizeof(sk->text));
	/* Read the normalised text again so offsets point into it. */
	if (tsec__key_parse(sk->text, strlen(sk->text), root_ok, &sk->k, why,
			    sizeof(why)))
		return tsec__seterr(err, TSEC_EKEY, "key", "invalid key: %s", why);
	memcpy(sk->segbuf, sk->text, sizeof(sk->segbuf));
	sk->n = sk->k.nseg;
	for (unsigned i = 0, o = 0; i < sk->n; i++) {
		sk->seg[i] = sk->segbuf + o;
		o += sk->k.len[i];
		sk->segbuf[o++] = '\0';
		if (strncmp(sk->seg[i], TSEC__RESERVED, TSEC__RESERVED_LEN) == 0)
			return tsec__seterr(err, TSEC_EKEY, sk->text,
					    "invalid key: names starting with "
					    TSEC__RESERVED " belong to the store");
	}
	return 0;
}

int tsec__store_check(struct tsec_store *s, const struct tsec_principal *who,
		      struct tsec_request *reqs, size_t n,
		      struct tsec_error *err)
{
	struct tsec_decision one, *d = n == 1 ? &one : calloc(n, sizeof(*d));
	uint64_t t0;
	int rc;

	if (!who || !who->id.ptr) {
		if (d != &one)
			free(d);
		return tsec__seterr(err, TSEC_EINVAL, "principal", "no principal");
	}
	if (!d)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	for (size_t i = 0; i < n; i++) {
		reqs[i].principal = who->id;
		reqs[i].roles = who->roles;
		reqs[i].nroles = who->nroles;
	}
	t0 = s->observer ? tsec__mono_ns() : 0;
	rc = tsec_bus_check(s->bus, s->endpoint, reqs, n, d, err);
	if (rc == 0 && s->observer)
		s->observer(s->observer_ctx, who->call_ctx, reqs, d, n, tsec__mono_ns() - t0);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char rules[TSEC_DECISION_RULES * (TSEC_ID_MAX + 2)] = "";
		size_t o = 0;

		if (d[i].allow)
			continue;
		for (unsigned j = 0; j < d[i].nrules; j++)
			o += (size_t)snprintf(rules + o, sizeof(rules) - o, "%s%s",
					      j ? ", " : "", d[i].rules[j]);
		/* e.g. "storage.list certificates/a: forbidden by floor (keys)" */
		rc = tsec__seterr(err, TSEC_EDENIED, "",
				  "%.*s %.*s: %s%s%s%s%s%s", (int)reqs[i].action.len,
				  reqs[i].action.ptr, (int)reqs[i].resource.len,
				  reqs[i].resource.ptr, tsec_status_reason(d[i].status),
				  d[i].nrules ? " (" : "", rules, d[i].nrules ? ")" : "",
				  d[i].detail[0] ? ": " : "", d[i].detail);
		snprintf(err->where, sizeof(err->where), "%.*s",
			 (int)reqs[i].resource.len, reqs[i].resource.ptr);
		break;
	}
	if (d != &one)
		free(d);
	return rc;
}

/* One request for a key. */
void tsec__req_for(struct tsec_request *r, const char *action,
		    const struct tsec__skey *sk)
{
	memset(r, 0, sizeof(*r));
	r->action = tsec_str_c(action);
	r->resource.ptr = sk->text;
	r->resource.len = strlen(sk->text);
}

bool tsec__is_cert_key(const struct tsec__skey *sk)
{
	return sk->k.kind == TSEC_KIND_CERT;
}

int tsec_store_open(struct tsec_store **out, const char *root,
		    struct tsec_bus *bus, const char *endpoint,
		    struct tsec_error *err)
{
	struct tsec_store *s;
	int fd;

	*out = NULL;
	if (!root || !*root || !bus)
		return tsec__seterr(err, TSEC_EINVAL, "", "store needs a root and a bus");
	if (endpoint && strlen(endpoint) >= TSEC_ENDPOINT_NAME_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "", "endpoint name too long");
	if (sodium_init() < 0)
		return tsec__seterr(err, TSEC_EIO, "", "libsodium failed to initialise");
	if (mkdir(root, 0700) < 0 && errno != EEXIST)
		return tsec__io_err(err, root, "cannot create store root");
	fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return tsec__io_err(err, root, "cannot open store root");
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	s->rootfd = fd;
	s->bus = bus;
	snprintf(s->endpoint, sizeof(s->endpoint), "%s", endpoint ? endpoint : "policy");
	s->value_max = TSEC_STORE_VALUE_MAX;
	*out = s;
	return 0;
}

void tsec_store_set_observer(struct tsec_store *s, tsec_store_observer_fn fn,
			     void *ctx)
{
	if (!s)
		return;
	s->observer = fn;
	s->observer_ctx = ctx;
}

void tsec_store_close(struct tsec_store **ps)
{
	if (!ps || !*ps)
		return;
	close((*ps)->rootfd);
	free(*ps);
	*ps = NULL;
}

int tsec__open_dirs(struct tsec_store *s, const struct tsec__skey *sk,
		    unsigned upto, bool create, int *dirfd,
		    struct tsec_error *err)
{
	int fd = dup(s->rootfd);

	*dirfd = -1;
	if (fd < 0)
		return tsec__io_err(err, "", "dup");
	for (unsigned i = 0; i < upto; i++) {
		int next = openat(fd, sk->seg[i],
				  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, sk->seg[i], 0700) < 0 && errno != EEXIST) {
				int rc = tsec__io_err(err, sk->text, "cannot create folder");
				close(fd);
				return rc;
			}
			/* Make the new folder's name durable. */
			fsync(fd);
			next = openat(fd, sk->seg[i],
				      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (next < 0) {
			int e = errno, rc;
			if (e == ENOTDIR)
				rc = tsec__seterr(err, create ? TSEC_EEXIST : TSEC_ENOENT,
						  sk->text, "'%s' is a file, not a folder",
						  sk->seg[i]);
			else if (e == ELOOP)
				rc = tsec__seterr(err, TSEC_EIO, sk->text,
						  "'%s' is a symbolic link; the store follows none",
						  sk->seg[i]);
			else
				rc = tsec__io_err(err, sk->text, "cannot open folder");
			close(fd);
			return rc;
		}
		close(fd);
		fd = next;
	}
	*dirfd = fd;
	return 0;
}

int tsec__write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int tsec__write_atomic(int dirfd, const char *leaf, const void *data,
		       size_t len, bool durable, struct tsec_error *err)
{
	char tmp[64];
	struct stat sb;
	int fd, rc;

	if (fstatat(dirfd, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
		return tsec__seterr(err, TSEC_EEXIST, leaf,
				    "'%s' is a folder; a folder is never replaced by a file", leaf);
	tsec__temp_name(tmp, sizeof(tmp), "tmp");
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return tsec__io_err(err, leaf, "cannot create temporary file");
	if (fchmod(fd, 0600) < 0 || tsec__write_all(fd, data, len) < 0 ||
	    (durable && fsync(fd) < 0)) {
		rc = tsec__io_err(err, leaf, "cannot write");
		close(fd);
		goto fail;
	}
	if (close(fd) < 0) {
		rc = tsec__io_err(err, leaf, "cannot write");
		goto fail;
	}
	if (renameat(dirfd, tmp, dirfd, leaf) < 0) {
		rc = errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST
			? tsec__seterr(err, TSEC_EEXIST, leaf, "'%s' is a folder", leaf)
			: tsec__io_err(err, leaf, "cannot rename into place");
		goto fail;
	}
	if (durable && fsync(dirfd) < 0)
		return tsec__io_err(err, leaf, "cannot sync folder");
	return 0;
fail:
	unlinkat(dirfd, tmp, 0);
	return rc;
}

int tsec_store_put(struct tsec_store *s, const struct tsec_principal *who,
		   const char *key, const void *value, size_t len,
		   struct tsec_error *err)
{
	struct tsec_put p = { key, value, len };

	return tsec_store_put_many(s, who, &p, 1, err);
}

/* Reads at most max bytes of an open file into a new NUL-ended buffer. */
int tsec__read_fd(int fd, size_t max, char **out, size_t *len,
		   struct tsec_error *err, const char *where)
{
	struct stat sb;
	size_t n = 0;
	char *buf;

	if (fstat(fd, &sb) < 0)
		return tsec__io_err(err, where, "cannot stat");
	if (!S_ISREG(sb.st_mode))
		return tsec__seterr(err, S_ISDIR(sb.st_mode) ? TSEC_EINVAL : TSEC_ENOENT,
				    where, "not a value (a folder or a special file)");
	if ((uint64_t)sb.st_size > max)
		return tsec__seterr(err, TSEC_ETOOBIG, where, "value larger than %zu bytes", max);
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf)
		return tsec__seterr(err, TSEC_ENOMEM, where, NULL);
	while (n < (size_t)sb.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)sb.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int tsec__open_beneath(struct tsec_store *s, const struct tsec__skey *sk,
		       int flags)
{
#ifdef SYS_openat2
	struct open_how how;

	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW);
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
	return (int)syscall(SYS_openat2, s->rootfd, sk->text, &how, sizeof(how));
#else
	(void)s;
	(void)sk;
	(void)flags;
	errno = ENOSYS;
	return -1;
#endif
}

/* The error of a failed read-side open, by errno. */
static int open_err(const struct tsec__skey *sk, struct tsec_error *err)
{
	if (errno == ENOENT || errno == ENOTDIR)
		return tsec__seterr(err, TSEC_ENOENT, sk->text, "%s: not found", sk->text);
	if (errno == ELOOP || errno == EXDEV)
		return tsec__seterr(err, TSEC_ENOENT, sk->text,
				    "%s: reached through a symbolic link; the store follows none",
				    sk->text);
	return tsec__io_err(err, sk->text, "cannot open");
}

/* Opens the value at sk for reading (after the check). */
int tsec__open_value(struct tsec_store *s, const struct tsec__skey *sk,
		      int *fdp, struct tsec_error *err)
{
	int dirfd, fd, rc;

	*fdp = tsec__open_beneath(s, sk, O_RDONLY);
	if (*fdp >= 0)
		return 0;
	if (errno != ENOSYS)
		return open_err(sk, err);
	/* No openat2: walk the folders one by one instead. */
	if ((rc = tsec__open_dirs(s, sk, sk->n - 1, false, &dirfd, err)))
		return rc;
	fd = openat(dirfd, sk->seg[sk->n - 1], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = errno == ELOOP
			? tsec__seterr(err, TSEC_ENOENT, sk->text, "a symbolic link is not a value")
			: tsec__io_err(err, sk->text, "cannot open");
		close(dirfd);
		return rc;
	}
	close(dirfd);
	*fdp = fd;
	return 0;
}

int tsec_store_get(struct tsec_store *s, const struct tsec_principal *who,
		   const char *key, char **out, size_t *len,
		   struct tsec_error *err)
{
	struct tsec__skey sk;
	struct tsec_request r;
	int fd, rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	*out = NULL;
	*len = 0;
	if ((rc = tsec__skey_parse(key, false, &sk, err)))
		return rc;
	tsec__req_for(&r, "storage.load", &sk);
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	if ((rc = tsec__open_value(s, &sk, &fd, err)))
		return rc;
	rc = tsec__read_fd(fd, s->value_max, out, len, err, sk.text);
	close(fd);
	return rc;
}

/*
 * Stats the key's path (never through a link) into *sb.  Returns 0, or -1
 * with errno.
 */
static int stat_key(struct tsec_store *s, const struct tsec__skey *sk,
		    struct stat *sb)
{
	struct tsec_error ignore;
	int fd = tsec__open_beneath(s, sk, O_PATH), rc;

	if (fd >= 0) {
		rc = fstat(fd, sb);
		close(fd);
		return rc;
	}
	if (errno != ENOSYS)
		return -1;
	if (tsec__open_dirs(s, sk, sk->n - 1, false, &fd, &ignore)) {
		errno = ENOENT;
		return -1;
	}
	rc = fstatat(fd, sk->seg[sk->n - 1], sb, AT_SYMLINK_NOFOLLOW);
	close(fd);
	return rc;
}

/* 1 file, 2 folder, 0 nothing (or something that is neither). */
static int kind_at(struct tsec_store *s, const struct tsec__skey *sk)
{
	struct stat sb;

	if (stat_key(s, sk, &sb) < 0)
		return 0;
	return S_ISREG(sb.st_mode) ? 1 : S_ISDIR(sb.st_mode) ? 2 : 0;
}

int tsec_store_exists(struct tsec_store *s, const struct tsec_principal *who,
		      const char *key, int *exists, struct tsec_error *err)
{
	struct tsec__skey sk;
	struct tsec_request r;
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	*exists = 0;
	if ((rc = tsec__skey_parse(key, false, &sk, err)))
		return rc;
	tsec__req_for(&r, "storage.exists", &sk);
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	*exists = kind_at(s, &sk) != 0;
	return 0;
}

int tsec_store_exists_many(struct tsec_store *s,
			   const struct tsec_principal *who,
			   const char *const *keys, size_t n, int *exists,
			   struct tsec_error *err)
{
	struct tsec__skey *sk = NULL;
	struct tsec_request *r = NULL;
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	if (n == 0)
		return 0;
	sk = malloc(n * sizeof(*sk));
	r = malloc(n * sizeof(*r));
	if (!sk || !r) {
		rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		exists[i] = 0;
		if ((rc = tsec__skey_parse(keys[i], false, &sk[i], err)))
			goto out;
		tsec__req_for(&r[i], "storage.exists", &sk[i]);
	}
	if ((rc = tsec__store_check(s, who, r, n, err)))
		goto out;
	for (size_t i = 0; i < n; i++)
		exists[i] = kind_at(s, &sk[i]) == 1;
out:
	free(sk);
	free(r);
	return rc;
}

/* Removes the folder `name` in dirfd and everything below it. */
static int rm_tree(int dirfd, const char *name)
{
	struct dirent *e;
	DIR *d;
	int fd, rc = 0;

	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d))) {
		struct stat sb;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -1;
			continue;
		}
		if (S_ISDIR(sb.st_mode))
			rc |= rm_tree(fd, e->d_name);
		else if (unlinkat(fd, e->d_name, 0) < 0)
			rc = -1;
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
		rc = -1;
	return rc;
}

int tsec_store_delete(struct tsec_store *s, const struct tsec_principal *who,
		      const char *key, int recursive, struct tsec_error *err)
{
	struct tsec__skey sk;
	struct tsec_request r;
	struct stat sb;
	int dirfd, rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	if ((rc = tsec__skey_parse(key, false, &sk, err)))
		return rc;
	tsec__req_for(&r, "storage.delete", &sk);
	if (recursive) {
		r.ctx.has |= TSEC_CTX_RECURSIVE;
		r.ctx.recursive = 1;
	}
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	if ((rc = tsec__open_dirs(s, &sk, sk.n - 1, false, &dirfd, err)))
		return rc;
	if (fstatat(dirfd, sk.seg[sk.n - 1], &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		rc = tsec__io_err(err, sk.text, "cannot delete");
	} else if (S_ISDIR(sb.st_mode)) {
		if (!recursive)
			rc = tsec__seterr(err, TSEC_EINVAL, sk.text,
					  "'%s' is a folder; delete it recursively", sk.text);
		else if (rm_tree(dirfd, sk.seg[sk.n - 1]) < 0)
			rc = tsec__io_err(err, sk.text, "cannot delete all of the folder");
	} else if (unlinkat(dirfd, sk.seg[sk.n - 1], 0) < 0) {
		rc = tsec__io_err(err, sk.text, "cannot delete");
	}
	if (rc == 0)
		fsync(dirfd);
	close(dirfd);
	return rc;
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

struct listing {
	struct tsec_strlist *out;
	size_t cap;
	int failed;
};

static void list_add(struct listing *l, const char *prefix, const char *name,
		     const char *suffix)
{
	char *k;
	int n;

	if (l->failed)
		return;
	if (l->out->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 32;
		char **nv = realloc(l->out->v, nc * sizeof(*nv));
		if (!nv) {
			l->failed = 1;
			return;
		}
		l->out->v = nv;
		l->cap = nc;
	}
	n = *prefix ? asprintf(&k, "%s/%s%s", prefix, name, suffix)
		    : asprintf(&k, "%s%s", name, suffix);
	if (n < 0) {
		l->failed = 1;
		return;
	}
	l->out->v[l->out->n++] = k;
}

/* Lists folder fd (whose key is prefix); consumes fd. */
static void list_dir(struct listing *l, int fd, const char *prefix,
		     int recursive, unsigned depth)
{
	struct dirent *e;
	DIR *d = fdopendir(fd);

	if (!d) {
		close(fd);
		l->failed = 1;
		return;
	}
	while ((e = readdir(d))) {
		struct stat sb;
		const char *nm = e->d_name;
		if (!strcmp(nm, ".") || !strcmp(nm, "..") ||
		    !strncmp(nm, TSEC__RESERVED, TSEC__RESERVED_LEN))
			continue;
		if (fstatat(fd, nm, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(sb.st_mode)) {
			list_add(l, prefix, nm, "");
		} else if (S_ISDIR(sb.st_mode)) {
			if (!recursive) {
				list_add(l, prefix, nm, "/");
			} else if (depth < TSEC_KEY_SEGMENTS) {
				char sub[TSEC_KEY_MAX * 2];
				int cfd = openat(fd, nm, O_RDONLY | O_DIRECTORY |
						 O_NOFOLLOW | O_CLOEXEC);
				if (cfd < 0)
					continue;
				snprintf(sub, sizeof(sub), "%s%s%s", prefix,
					 *prefix ? "/" : "", nm);
				list_dir(l, cfd, sub, recursive, depth + 1);
			}
		}
	}
	closedir(d);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int tsec_store_list(struct tsec_store *s, const struct tsec_principal *who,
		    const char *prefix, int recursive, struct tsec_strlist *out,
		    struct tsec_error *err)
{
	struct listing l = { out, 0, 0 };
	struct tsec__skey sk;
	struct tsec_request r;
	int fd, rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	out->v = NULL;
	out->n = 0;
	if ((rc = tsec__skey_parse(prefix, true, &sk, err)))
		return rc;
	tsec__req_for(&r, "storage.list", &sk);
	if (recursive) {
		r.ctx.has |= TSEC_CTX_RECURSIVE;
		r.ctx.recursive = 1;
	}
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	if ((rc = tsec__open_dirs(s, &sk, sk.n, false, &fd, err)))
		return rc == TSEC_ENOENT && kind_at(s, &sk) == 1
			? tsec__seterr(err, TSEC_EINVAL, sk.text, "'%s' is a file, not a folder", sk.text)
			: rc;
	list_dir(&l, fd, sk.text, recursive, sk.n);
	if (l.failed) {
		tsec_strlist_free(out);
		return tsec__seterr(err, TSEC_ENOMEM, sk.text, "cannot list");
	}
	qsort(out->v, out->n, sizeof(*out->v), cmp_str);
	return 0;
}

int tsec_store_stat(struct tsec_store *s, const struct tsec_principal *who,
		    const char *key, struct tsec_stat *st,
		    struct tsec_error *err)
{
	struct tsec__skey sk;
	struct tsec_request r;
	struct stat sb;
	int rc;

	if (!s)
		return tsec__seterr(err, TSEC_EINVAL, "", "no store");

	memset(st, 0, sizeof(*st));
	if ((rc = tsec__skey_parse(key, false, &sk, err)))
		return rc;
	tsec__req_for(&r, "storage.stat", &sk);
	if ((rc = tsec__store_check(s, who, &r, 1, err)))
		return rc;
	if (stat_key(s, &sk, &sb) < 0)
		return open_err(&sk, err);
	if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
		return tsec__seterr(err, TSEC_ENOENT, sk.text, "not a value or a folder");
	st->size = (uint64_t)sb.st_size;
	st->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	st->is_file = S_ISREG(sb.st_mode);
	return 0;
}
