/*
 * A scripted HTTP/1.1 server for the tests, on loopback: a hostile or
 * broken peer (an etcd member, an S3 endpoint) answering what a test
 * scripts, one request per connection (Connection: close).  Each answer
 * is chosen by the request path's first match in the script; what came
 * is kept, so a test can look at the heads a client sent.
 */
#ifndef TSEC_TESTS_HTTPFAKE_H
#define TSEC_TESTS_HTTPFAKE_H

#include <pthread.h>
#include <stdatomic.h>

#define TU_FAKE_RULES 8
#define TU_FAKE_HEADS 64

struct tu_fake_rule {
	const char *path_prefix;     /* matched against the request target */
	int status;
	const char *body;            /* sent with Content-Length */
	int times;                   /* answered this many times, then skipped (0: always) */
};

struct tu_fake {
	int lfd, port;
	atomic_int stop;
	pthread_t th;
	struct tu_fake_rule rule[TU_FAKE_RULES];
	int used[TU_FAKE_RULES];
	int nrules;
	pthread_mutex_t mu;
	char *heads[TU_FAKE_HEADS];  /* the heads received, in order */
	int nheads;
};

/* The largest request body any fake here reads. */
#define TU_HTTP_BODY_MAX ((size_t)64 << 20)

/*
 * Reads one HTTP/1.1 request from fd, the one reader every fake server
 * of the tests shares: its head into head (NUL-terminated, ending with
 * its last header's CRLF), and its body (Content-Length bytes, at most
 * TU_HTTP_BODY_MAX) into *body (new, when body is given; else read and
 * dropped) with its length in *blen.  Answers "100 Continue" when the
 * client expects it.  0, or -1 for a request cut short or too large.
 */
int tu_http_read_request(int fd, char *head, size_t cap, unsigned char **body, size_t *blen);

/* Starts it on a free loopback port with rules[0..n); 0 or -1. */
int tu_fake_start(struct tu_fake *f, const struct tu_fake_rule *rules, int n);
void tu_fake_stop(struct tu_fake *f);
/* Whether any head received so far contains needle (case-sensitive). */
int tu_fake_saw(struct tu_fake *f, const char *needle);
/* How many requests came. */
int tu_fake_count(struct tu_fake *f);

#endif
