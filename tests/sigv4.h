/*
 * An AWS Signature Version 4 verifier for the tests, written from AWS's
 * published description with OpenSSL's HMAC and SHA-256: independent of
 * the signer under test (libcurl's CURLOPT_AWS_SIGV4), and checked
 * against AWS's own test vectors (tests/data/sigv4, test_s3).
 *
 * And a verifying proxy: an HTTP/1.1 server on loopback that checks each
 * request's signature as S3 does (access key, scope, every signed header
 * present, the payload's SHA-256, the signature) before it forwards the
 * request to an upstream S3-compatible server (s3rver, which checks no
 * signature), answering 403 with S3's error codes when it does not hold.
 */
#ifndef TSEC_TESTS_SIGV4_H
#define TSEC_TESTS_SIGV4_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define TU_SIGV4_HEADERS 64

struct tu_sigv4_header {
	char name[64];               /* as sent */
	char value[1024];
};

/* A request as the verifier reads it. */
struct tu_sigv4_req {
	char method[16];
	char path[2048];             /* decoded: what the URI names */
	char query[4096];            /* raw (still encoded), without '?' */
	struct tu_sigv4_header h[TU_SIGV4_HEADERS];
	int nh;
	const unsigned char *body;
	size_t body_len;
};

/* The canonical request for r, signing signed_headers (";"-separated,
 * lower case), with payload_hash; 0, or -1 when it does not fit. */
int tu_sigv4_canonical(const struct tu_sigv4_req *r, const char *signed_headers,
		       const char *payload_hash, char *out, size_t cap);
/* The string to sign. */
void tu_sigv4_string_to_sign(const char *amz_date, const char *scope, const char *canonical,
			     char *out, size_t cap);
/* The signature (64 hex digits and a NUL) of sts under secret and the
 * scope's date, region and service. */
void tu_sigv4_signature(const char *secret, const char *date, const char *region,
			const char *service, const char *sts, char out[65]);

/*
 * Verifies r's Authorization header as S3 would, for access key `access`
 * with `secret`: 0, or -1 with why (and the S3 error code in code:
 * InvalidAccessKeyId, SignatureDoesNotMatch, AuthorizationHeaderMalformed,
 * XAmzContentSHA256Mismatch, AccessDenied).
 */
int tu_sigv4_verify(const struct tu_sigv4_req *r, const char *access, const char *secret,
		    char *code, size_t codecap, char *why, size_t whycap);

struct tu_sigv4_proxy {
	int lfd, port, upstream_port;
	char access[64], secret[128];
	atomic_int stop;
	pthread_t th;
	atomic_int accepted, refused, live;
	pthread_mutex_t mu;
	char last_refusal[512];      /* code: why */
};

/* Starts the proxy on a free loopback port, in front of 127.0.0.1 at
 * upstream_port; 0 or -1. */
int tu_sigv4_proxy_start(struct tu_sigv4_proxy *p, int upstream_port, const char *access,
			 const char *secret);
void tu_sigv4_proxy_stop(struct tu_sigv4_proxy *p);
/* The last refusal's "code: why" into out. */
void tu_sigv4_proxy_last(struct tu_sigv4_proxy *p, char *out, size_t n);

#endif
