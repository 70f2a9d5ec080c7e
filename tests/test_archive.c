/*
 * verify_module --archive: archives made here with libarchive, served from
 * file:// and from a small HTTP server on 127.0.0.1 run by this test.
 * A good archive runs; a wrong digest, a cut archive, an archive without
 * a module, and entries escaping the folder are refused.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <jansson.h>
#include <sys/wait.h>
#include <archive_entry.h>
#include <openssl/evp.h>

#include "tests/testutil.h"
#include "verifier/verify.h"

static char dir[64];
static int port;
static int lsock;
static atomic_int stop;
static pthread_t server;

/* ---- a tiny HTTP/1.0 server for files in dir ---- */

static void *serve(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		char req[1024], path[512], file[1024], head[128];
		int c = accept(lsock, NULL, NULL);
		ssize_t n;
		FILE *f;
		if (c < 0)
			continue;
		n = read(c, req, sizeof(req) - 1);
		if (n > 0) {
			req[n] = '\0';
			if (sscanf(req, "GET %511s", path) == 1 && !strstr(path, "..") &&
			    snprintf(file, sizeof(file), "%s%s", dir, path) > 0 &&
			    (f = fopen(file, "rb"))) {
				static char body[64 << 20];
				size_t len = fread(body, 1, sizeof(body), f);
				fclose(f);
				int hl = snprintf(head, sizeof(head),
						  "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n", len);
				if (write(c, head, (size_t)hl) == hl) {
					size_t off = 0;
					while (off < len) {
						ssize_t w = write(c, body + off, len - off);
						if (w <= 0)
							break;
						off += (size_t)w;
					}
				}
			} else {
				const char *nf = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n";
				if (write(c, nf, strlen(nf)) < 0)
					break;
			}
		}
		close(c);
	}
	return NULL;
}

static int setup(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t l = sizeof(a);
	(void)state;

	snprintf(dir, sizeof(dir), "/tmp/tsec-archive-test-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	lsock = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lsock, (struct sockaddr *)&a, sizeof(a)) || listen(lsock, 8) ||
	    getsockname(lsock, (struct sockaddr *)&a, &l))
		return -1;
	port = ntohs(a.sin_port);
	return pthread_create(&server, NULL, serve, NULL);
}

static int teardown(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char cmd[128];
	int c;
	(void)state;

	atomic_store(&stop, 1);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c = socket(AF_INET, SOCK_STREAM, 0);
	connect(c, (struct sockaddr *)&a, sizeof(a)); /* wakes accept() */
	close(c);
	pthread_join(server, NULL);
	close(lsock);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* ---- archives ---- */

struct entry {
	const char *path;
	const char *from_file;       /* content from this file, or */
	const char *text;            /* this text, or */
	const char *symlink;         /* a symbolic link to this, or */
	const char *hardlink;        /* a hard link to this entry, or */
	size_t zeros;                /* this many zero bytes */
};

static void make_archive(const char *name, const struct entry *e, size_t n)
{
	struct archive *a = archive_write_new();
	char out[256];

	snprintf(out, sizeof(out), "%s/%s", dir, name);
	archive_write_add_filter_gzip(a);
	archive_write_set_format_pax_restricted(a);
	assert_int_equal(archive_write_open_filename(a, out), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		char *data = NULL;
		size_t len = 0;
		struct tsec_error err;
		archive_entry_set_pathname(ae, e[i].path);
		if (e[i].hardlink) {
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, e[i].hardlink);
			archive_entry_set_perm(ae, 0644);
		} else if (e[i].zeros) {
			assert_non_null(data = calloc(1, e[i].zeros));
			len = e[i].zeros;
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, 0644);
			archive_entry_set_size(ae, (la_int64_t)len);
		} else if (e[i].symlink) {
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, e[i].symlink);
			archive_entry_set_perm(ae, 0777);
		} else {
			if (e[i].from_file)
				assert_int_equal(tsec_read_file(e[i].from_file, 64 << 20, &data, &len, &err), 0);
			else
				data = strdup(e[i].text), len = strlen(e[i].text);
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, 0644);
			archive_entry_set_size(ae, (la_int64_t)len);
		}
		assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
		if (data)
			assert_int_equal(archive_write_data(a, data, len), (la_ssize_t)len);
		free(data);
		archive_entry_free(ae);
	}
	archive_write_close(a);
	archive_write_free(a);
}

static void digest_of(const char *name, char hex[65])
{
	char path[256], *data;
	unsigned char md[32];
	unsigned int l;
	size_t len;
	struct tsec_error err;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(tsec_read_file(path, 64 << 20, &data, &len, &err), 0);
	EVP_Digest(data, len, md, &l, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	free(data);
}

/* Bounds for the next run (0: the defaults). */
static uint64_t bound_all, bound_one;
static unsigned bound_entries;
/* And how the next run is asked for (0: text, no budget, this build). */
static int want_json, want_budget;
static uint32_t as_build = TSEC_BUILD_THIS;

static int run(const char *url, const char *name, const char *digest,
	       char *out, size_t outlen, char *errs, size_t errlen)
{
	struct tsec_verify_opts o = {
		.policy = "examples/policy.json",
		.calls = 5,
		.warmup = 0,
		.p50_ns = TSEC_BUDGET_P50_NS,
		.p99_ns = TSEC_BUDGET_P99_NS,
		.verifier_build = as_build,
		.max_unpacked = bound_all,
		.max_entry = bound_one,
		.max_entries = bound_entries,
		.json = want_json,
		.budget = want_budget,
	};
	FILE *fo = fmemopen(out, outlen, "w"), *fe = fmemopen(errs, errlen, "w");
	int rc;

	memset(out, 0, outlen);
	memset(errs, 0, errlen);
	rc = tsec_verify_archive(&o, url, name, digest, fo, fe);
	fclose(fo);
	fclose(fe);
	return rc;
}

static const struct entry good[] = {
	{ "tinysecurity-9/lib/tinysecurity/libtinysecurity_module.so", MODULE_PATH, NULL, NULL, NULL, 0 },
	{ "tinysecurity-9/share/tinysecurity/examples/policy.json", "examples/policy.json", NULL, NULL, NULL, 0 },
	{ "tinysecurity-9/share/tinysecurity/examples/link-to-policy", NULL, NULL, "policy.json", NULL, 0 },
};

static void test_archive_good(void **state)
{
	static char out[16384], errs[4096];
	char url[128], hex[65];
	(void)state;

	make_archive("good.tar.gz", good, 3);
	digest_of("good.tar.gz", hex);
	snprintf(url, sizeof(url), "file://%s", dir);
	if (run(url, "good.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)))
		fail_msg("file: %s", errs);
	assert_non_null(strstr(out, "SHA-256 verified"));
	assert_non_null(strstr(out, "fetch"));
	assert_non_null(strstr(out, "first call"));
	assert_non_null(strstr(out, "evaluate"));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	if (run(url, "good.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)))
		fail_msg("http: %s", errs);
	assert_non_null(strstr(out, "SHA-256 verified"));
	/* Upper-case digests are the same digest. */
	for (char *p = hex; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 32);
	assert_int_equal(run(url, "good.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)), 0);
}

static void test_archive_refused(void **state)
{
	static char out[16384], errs[4096];
	static const struct entry nomod[] = { { "pkg/README", NULL, "nothing here", NULL, NULL, 0 } };
	static const struct entry absolute[] = { { "/tmp/tsec-evil", NULL, "x", NULL, NULL, 0 } };
	static const struct entry dotdot[] = { { "pkg/../../tsec-evil", NULL, "x", NULL, NULL, 0 } };
	static const struct entry symabs[] = { { "pkg/evil", NULL, NULL, "/etc/passwd", NULL, 0 } };
	static const struct entry symrel[] = { { "pkg/evil", NULL, NULL, "../../etc/passwd", NULL, 0 } };
	struct {
		const char *name;
		const struct entry *e;
		const char *why;
	} cases[] = {
		{ "nomod.tar.gz", nomod, "holds no" },
		{ "absolute.tar.gz", absolute, "absolute or with '..'" },
		{ "dotdot.tar.gz", dotdot, "absolute or with '..'" },
		{ "symabs.tar.gz", symabs, "a link leaving" },
		{ "symrel.tar.gz", symrel, "a link leaving" },
	};
	char url[128], hex[65], path[256], cut[256];
	(void)state;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		make_archive(cases[i].name, cases[i].e, 1);
		digest_of(cases[i].name, hex);
		assert_int_equal(run(url, cases[i].name, hex, out, sizeof(out), errs, sizeof(errs)),
				 TSEC_VERIFY_EXIT_REFUSED);
		if (!strstr(errs, cases[i].why))
			fail_msg("%s: '%s' lacks '%s'", cases[i].name, errs, cases[i].why);
	}
	assert_int_equal(access("/tmp/tsec-evil", F_OK), -1);
	/* Wrong digest. */
	make_archive("good.tar.gz", good, 2);
	assert_int_equal(run(url, "good.tar.gz",
			     "0000000000000000000000000000000000000000000000000000000000000000",
			     out, sizeof(out), errs, sizeof(errs)), TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "SHA-256 mismatch"));
	assert_int_equal(run(url, "good.tar.gz", "abc", out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	/* Cut short, with the digest of what is left: still refused. */
	{
		char *data;
		size_t len;
		struct tsec_error err;
		FILE *f;
		snprintf(path, sizeof(path), "%s/good.tar.gz", dir);
		snprintf(cut, sizeof(cut), "%s/cut.tar.gz", dir);
		assert_int_equal(tsec_read_file(path, 64 << 20, &data, &len, &err), 0);
		f = fopen(cut, "wb");
		fwrite(data, 1, len / 2, f);
		fclose(f);
		free(data);
	}
	digest_of("cut.tar.gz", hex);
	assert_int_equal(run(url, "cut.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "cut short"));
	/* Not there. */
	assert_int_equal(run(url, "missing.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "cannot fetch"));
	/* Only file, http and https. */
	assert_int_equal(run("ftp://127.0.0.1", "x.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_int_equal(run(url, "../x.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
}

/*
 * Bounded unpacking: a decompression bomb stops at the bound, counted
 * while unpacking; so do too many entries; and a hard link to a symbolic
 * link is checked as the link it makes, where it makes it.
 */
static void test_archive_bounds(void **state)
{
	static char out[16384], errs[4096];
	static struct entry bomb[3], many[24], chained[4];
	char url[128], hex[65], names[24][32];
	(void)state;

	snprintf(url, sizeof(url), "file://%s", dir);
	bomb[0] = good[0];
	bomb[1] = good[1];
	bomb[2] = (struct entry){ .path = "tinysecurity-9/zeros", .zeros = 48u << 20 };
	make_archive("bomb.tar.gz", bomb, 3);
	digest_of("bomb.tar.gz", hex);
	bound_all = 16u << 20;
	assert_int_equal(run(url, "bomb.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "unpacks past the archive's bound (16 MiB)"));
	bound_all = 0;
	bound_one = 8u << 20;
	assert_int_equal(run(url, "bomb.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "unpacks past an entry's bound (8 MiB)"));
	bound_one = 0;
	/* Within the defaults it unpacks. */
	assert_int_equal(run(url, "bomb.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)), 0);

	many[0] = good[0];
	for (int i = 1; i < 24; i++) {
		snprintf(names[i], sizeof(names[i]), "tinysecurity-9/f%d", i);
		many[i] = (struct entry){ .path = names[i], .text = "x" };
	}
	make_archive("many.tar.gz", many, 24);
	digest_of("many.tar.gz", hex);
	bound_entries = 10;
	assert_int_equal(run(url, "many.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "more than 10 entries"));
	bound_entries = 0;

	chained[0] = good[0];
	chained[1] = (struct entry){ .path = "pkg/a/b/s", .symlink = "../../t" };
	chained[2] = (struct entry){ .path = "h", .hardlink = "pkg/a/b/s" };
	make_archive("chained.tar.gz", chained, 3);
	digest_of("chained.tar.gz", hex);
	assert_int_equal(run(url, "chained.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "'h': a link leaving"));
}

/*
 * --json prints one JSON object (the archive's steps a member of it) and
 * escapes what the URL holds (issue 37, item 12: it printed two objects,
 * the URL raw).
 */
static void test_archive_json(void **state)
{
	static char out[16384], errs[4096];
	char url[128], hex[65];
	json_error_t je;
	json_t *j;
	const char *u;
	(void)state;

	make_archive("q\"uote.tar.gz", good, 3);
	digest_of("q\"uote.tar.gz", hex);
	snprintf(url, sizeof(url), "file://%s", dir);
	want_json = 1;
	if (run(url, "q\"uote.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)))
		fail_msg("json: %s", errs);
	want_json = 0;
	if (!(j = json_loads(out, 0, &je)))
		fail_msg("not one JSON object (%s): %s", je.text, out);
	assert_non_null(u = json_string_value(json_object_get(json_object_get(j, "archive"), "url")));
	assert_non_null(strstr(u, "/q\"uote.tar.gz"));
	assert_true(json_is_integer(json_object_get(json_object_get(j, "archive"), "unpack_ns")));
	assert_true(json_is_object(json_object_get(json_object_get(j, "methods"), "evaluate")));
	json_decref(j);
}

/*
 * With the budget on, a debug verifier is refused before anything is
 * fetched, and a debug module before any call of it is timed.
 */
static void test_archive_budget_refusals(void **state)
{
	static char out[16384], errs[4096];
	char url[128], hex[65];
	(void)state;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	want_budget = 1;
	as_build = TSEC_BUILD_DEBUG;
	assert_int_equal(run(url, "missing.tar.gz", "00", out, sizeof(out), errs, sizeof(errs)),
			 TSEC_VERIFY_EXIT_REFUSED);
	assert_non_null(strstr(errs, "refusing to time a debug build of verify_module"));
	assert_null(strstr(errs, "cannot fetch"));
	as_build = TSEC_BUILD_RELEASE;
	make_archive("good.tar.gz", good, 3);
	digest_of("good.tar.gz", hex);
	if (TSEC_BUILD_THIS != TSEC_BUILD_RELEASE) {
		/* This build's module is a debug one. */
		assert_int_equal(run(url, "good.tar.gz", hex, out, sizeof(out), errs, sizeof(errs)),
				 TSEC_VERIFY_EXIT_REFUSED);
		assert_non_null(strstr(errs, "build of the module in good.tar.gz"));
		assert_null(strstr(out, "first call"));
	} else {
		assert_int_not_equal(run(url, "good.tar.gz", hex, out, sizeof(out), errs,
					 sizeof(errs)), TSEC_VERIFY_EXIT_REFUSED);
	}
	want_budget = 0;
	as_build = TSEC_BUILD_THIS;
}

/* The program takes URL NAME DIGEST as three values, --archive or not. */
static void test_archive_positional(void **state)
{
	char cmd[1024], hex[65];
	int st;
	(void)state;

	make_archive("good.tar.gz", good, 3);
	digest_of("good.tar.gz", hex);
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/verify_module --calls 5 --warmup 0 "
		 "file://%s good.tar.gz %s >/dev/null 2>&1", dir, hex);
	st = system(cmd);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/verify_module --calls 5 --warmup 0 "
		 "--archive file://%s good.tar.gz %s >/dev/null 2>&1", dir, hex);
	st = system(cmd);
	assert_int_equal(WEXITSTATUS(st), 0);
	/* Two values are neither a module nor an archive. */
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/verify_module file://%s good.tar.gz "
		 ">/dev/null 2>&1", dir);
	st = system(cmd);
	assert_int_equal(WEXITSTATUS(st), TSEC_VERIFY_EXIT_REFUSED);
	snprintf(cmd, sizeof(cmd), TSEC_BUILD_DIR "/verify_module --archive file://%s "
		 "good.tar.gz %s extra >/dev/null 2>&1", dir, hex);
	st = system(cmd);
	assert_int_equal(WEXITSTATUS(st), TSEC_VERIFY_EXIT_REFUSED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_archive_good),
		cmocka_unit_test(test_archive_refused),
		cmocka_unit_test(test_archive_bounds),
		cmocka_unit_test(test_archive_json),
		cmocka_unit_test(test_archive_budget_refusals),
		cmocka_unit_test(test_archive_positional),
	};
	return cmocka_run_group_tests_name("archive", tests, setup, teardown);
}
