/*
 * The S3 provider (broker/remote/blobs_s3.c) against a scripted server
 * on loopback: the answers real S3-compatibles give that s3rver (which
 * test_remote runs every contract case on) never does.  A server without
 * conditional writes answers 501 to If-None-Match; a writer that raced
 * past the HEAD meets 412; a failing server must never read as success.
 *
 * The server is a thread answering one request per connection
 * (Connection: close), with the status the case scripts for each kind of
 * request, and it counts what it was sent.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/remote/blobs.h"
#include "common/clock.h"
#include "tests/testutil.h"

struct fake {
	int lfd, port;
	atomic_int stop;
	pthread_t th;
	/* The script: the status for each kind of request; and, first, the
	 * first `fail_first` requests of kind `fail_kind` ('H' HEAD, 'C' a
	 * conditional PUT) answered `fail_status`. */
	int head, put_conditional, put_plain;
	int fail_first, fail_status;
	char fail_kind;
	atomic_int failed;
	/* What came. */
	atomic_int heads, conditional_puts, plain_puts, others;
	atomic_size_t body_bytes;
};

/* Reads one request's head and its body; 0, or -1 on a broken request. */
static int read_request(int fd, char *head, size_t cap, size_t *body)
{
	size_t n = 0, want;
	char *end, *cl;

	for (;;) {
		ssize_t r;

		if (n + 1 >= cap)
			return -1;
		if ((r = read(fd, head + n, cap - 1 - n)) <= 0)
			return -1;
		n += (size_t)r;
		head[n] = '\0';
		if ((end = strstr(head, "\r\n\r\n")))
			break;
	}
	cl = strcasestr(head, "\r\ncontent-length:");
	want = cl ? strtoul(cl + 17, NULL, 10) : 0;
	*body = want;
	/* The body bytes already read, then the rest. */
	n -= (size_t)(end + 4 - head);
	while (n < want) {
		char sink[4096];
		ssize_t r = read(fd, sink, sizeof(sink));

		if (r <= 0)
			return -1;
		n += (size_t)r;
	}
	*end = '\0';
	return 0;
}

static void answer(int fd, int status)
{
	char out[160];
	int n = snprintf(out, sizeof(out), "HTTP/1.1 %d Scripted\r\nContent-Length: 0\r\n"
			 "Connection: close\r\n\r\n", status);
	ssize_t w = write(fd, out, (size_t)n);

	(void)w;
}

static void *serve(void *arg)
{
	struct fake *f = arg;

	while (!atomic_load(&f->stop)) {
		struct pollfd p = { f->lfd, POLLIN, 0 };
		char head[8192];
		size_t body;
		int fd, status = 400;

		if (poll(&p, 1, 20) <= 0 || (fd = accept(f->lfd, NULL, NULL)) < 0)
			continue;
		if (read_request(fd, head, sizeof(head), &body) == 0) {
			char kind = 0;
			atomic_fetch_add(&f->body_bytes, body);
			if (!strncmp(head, "HEAD ", 5)) {
				atomic_fetch_add(&f->heads, 1);
				status = f->head;
				kind = 'H';
			} else if (!strncmp(head, "PUT ", 4) &&
				   strcasestr(head, "\r\nif-none-match:")) {
				atomic_fetch_add(&f->conditional_puts, 1);
				status = f->put_conditional;
				kind = 'C';
			} else if (!strncmp(head, "PUT ", 4)) {
				atomic_fetch_add(&f->plain_puts, 1);
				status = f->put_plain;
			} else {
				atomic_fetch_add(&f->others, 1);
			}
			if (kind && kind == f->fail_kind && atomic_load(&f->failed) < f->fail_first) {
				atomic_fetch_add(&f->failed, 1);
				status = f->fail_status;
			}
			answer(fd, status);
		}
		close(fd);
	}
	return NULL;
}

static void fake_start(struct fake *f, int head, int put_conditional, int put_plain)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	/* Kept across the memset: a case sets them before starting. */
	int fail_first = f->fail_first, fail_status = f->fail_status;
	char fail_kind = f->fail_kind;

	memset(f, 0, sizeof(*f));
	f->fail_first = fail_first;
	f->fail_status = fail_status;
	f->fail_kind = fail_kind;
	f->head = head;
	f->put_conditional = put_conditional;
	f->put_plain = put_plain;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true((f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(f->lfd, 16), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
	f->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&f->th, NULL, serve, f), 0);
}

static void fake_stop(struct fake *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->th, NULL);
	close(f->lfd);
}

/* The provider on the scripted server, path-style. */
static struct tsec__blobs *open_on(const struct fake *f, char *dir)
{
	char ep[64], secret[512];
	struct tsec_remote_opts o = { 0 };
	struct tsec__blobs *b = NULL;
	struct tsec_error err;
	FILE *fp;

	assert_non_null(mkdtemp(dir));
	snprintf(secret, sizeof(secret), "%s/s3.secret", dir);
	assert_non_null(fp = fopen(secret, "w"));
	fputs("scripted-secret\n", fp);
	fclose(fp);
	assert_int_equal(chmod(secret, 0600), 0);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f->port);
	o.s3_endpoint = ep;
	o.s3_access_key = "SCRIPTED";
	o.s3_secret_file = secret;
	o.timeout_ms = 20000;
	if (tsec__blobs_s3_open(&b, "tsec-test/p", &o, &err))
		fail_msg("s3 open: %s", err.msg);
	return b;
}

static void cleanup(char *dir)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/s3.secret", dir);
	unlink(path);
	rmdir(dir);
}

static const char NAME[] = "crt/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char BLOB[] = "-----BEGIN CERTIFICATE-----\nscripted\n-----END CERTIFICATE-----\n";

/*
 * One put_new of BLOB against a server answering HEAD, a conditional PUT
 * and a plain PUT with the given statuses; its result, with what the
 * server was sent left in *f and the error in *err.
 */
static int put_against(struct fake *f, int head, int put_conditional, int put_plain,
		       struct tsec_error *err)
{
	char dir[] = "/tmp/tsec-s3-XXXXXX";
	struct tsec__blobs *b;
	int rc;

	fake_start(f, head, put_conditional, put_plain);
	b = open_on(f, dir);
	rc = b->ops->put_new(b, NAME, BLOB, sizeof(BLOB) - 1, err);
	b->ops->close(b);
	fake_stop(f);
	cleanup(dir);
	return rc;
}

/*
 * A server without conditional writes (501 to If-None-Match): the blob is
 * written with a plain PUT once the HEAD found none, and the write is
 * reported done.
 */
static void test_s3_no_conditional_writes(void **state)
{
	struct fake f = { 0 };
	struct tsec_error err;

	(void)state;
	if (put_against(&f, 404, 501, 200, &err))
		fail_msg("put_new on a server without If-None-Match: %s", err.msg);
	assert_int_equal(atomic_load(&f.heads), 1);
	assert_int_equal(atomic_load(&f.conditional_puts), 1);
	assert_int_equal(atomic_load(&f.plain_puts), 1);
	/* The blob went whole, both times. */
	assert_int_equal(atomic_load(&f.body_bytes), 2 * (sizeof(BLOB) - 1));
}

/* A writer that raced past the HEAD took the name: 412 is "exists",
 * never a second, unconditional write; and a blob already there (HEAD
 * 200) is "exists" without a write. */
static void test_s3_taken_is_exists(void **state)
{
	struct fake f = { 0 };
	struct tsec_error err;

	(void)state;
	assert_int_equal(put_against(&f, 404, 412, 200, &err), TSEC_EEXIST);
	assert_int_equal(atomic_load(&f.conditional_puts), 1);
	assert_int_equal(atomic_load(&f.plain_puts), 0);
	assert_int_equal(put_against(&f, 200, 200, 200, &err), TSEC_EEXIST);
	assert_int_equal(atomic_load(&f.conditional_puts) + atomic_load(&f.plain_puts), 0);
}

/* A server that fails (500, 403, 501 to both kinds of PUT) is an error,
 * never a write reported done. */
static void test_s3_failures_are_errors(void **state)
{
	static const int script[][3] = {
		{ 404, 500, 200 }, { 404, 403, 200 }, { 404, 501, 500 }, { 404, 501, 501 },
		{ 500, 200, 200 }, { 403, 200, 200 },
	};
	(void)state;

	/* A 500 is asked again (test_s3_transient_retried): the pauses as
	 * steps of the virtual clock. */
	atomic_store(&tsec__clock_virtual, true);
	for (size_t i = 0; i < sizeof(script) / sizeof(script[0]); i++) {
		struct fake f = { 0 };
		struct tsec_error err;
		int rc = put_against(&f, script[i][0], script[i][1], script[i][2], &err);

		if (rc == 0 || rc == TSEC_EEXIST)
			fail_msg("script %zu (HEAD %d, PUT %d/%d): put_new said %d", i, script[i][0],
				 script[i][1], script[i][2], rc);
		assert_true(err.msg[0] != '\0');
	}
	atomic_store(&tsec__clock_virtual, false);
}

/*
 * A store that is busy or failed inside for a moment (503 SlowDown, 500
 * InternalError: S3 asks clients to retry them) is asked again, a few
 * times: the write then goes through.  One that keeps failing is an
 * error after S3_TRIES (4) requests, never more; 501 is never retried.
 * The pauses between tries are steps of the virtual clock.
 */
static void test_s3_transient_retried(void **state)
{
	struct fake f = { 0 };
	struct tsec_error err;
	(void)state;

	atomic_store(&tsec__clock_virtual, true);
	/* Two HEADs answered 503, then the blob is absent and written. */
	f.fail_kind = 'H';
	f.fail_first = 2;
	f.fail_status = 503;
	if (put_against(&f, 404, 200, 200, &err))
		fail_msg("put_new after two 503s: %s", err.msg);
	assert_int_equal(atomic_load(&f.heads), 3);
	assert_int_equal(atomic_load(&f.conditional_puts), 1);
	/* Three conditional PUTs answered 500, the fourth written. */
	memset(&f, 0, sizeof(f));
	f.fail_kind = 'C';
	f.fail_first = 3;
	f.fail_status = 500;
	if (put_against(&f, 404, 200, 200, &err))
		fail_msg("put_new after three 500s: %s", err.msg);
	assert_int_equal(atomic_load(&f.conditional_puts), 4);
	assert_int_equal(atomic_load(&f.plain_puts), 0);
	/* Four: an error, after exactly four tries. */
	memset(&f, 0, sizeof(f));
	f.fail_kind = 'C';
	f.fail_first = 100;
	f.fail_status = 502;
	assert_int_equal(put_against(&f, 404, 200, 200, &err), TSEC_EIO);
	assert_non_null(strstr(err.msg, "HTTP 502"));
	assert_int_equal(atomic_load(&f.conditional_puts), 4);
	atomic_store(&tsec__clock_virtual, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_s3_no_conditional_writes),
		cmocka_unit_test(test_s3_taken_is_exists),
		cmocka_unit_test(test_s3_failures_are_errors),
		cmocka_unit_test(test_s3_transient_retried),
	};

	return cmocka_run_group_tests_name("s3: a scripted server", tests, NULL, NULL);
}
