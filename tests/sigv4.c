/*
 * The tests' SigV4 verifier and verifying proxy (tests/sigv4.h).  Read
 * from AWS's description of Signature Version 4 as S3 applies it: the
 * canonical URI encodes each byte of the path once (no normalisation),
 * the query's names and values are encoded and sorted, each signed
 * header appears once with its values trimmed, their inner runs of
 * spaces collapsed and repeats joined by commas.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "tests/httpfake.h"
#include "tests/sigv4.h"

/* ---- encoding ---- */

static int unreserved(unsigned char c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Appends s[0..n) URI-encoded (keeping '/' when keep_slash). */
static int enc(char *out, size_t cap, size_t *o, const char *s, size_t n, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (unreserved(c) || (keep_slash && c == '/')) {
			if (*o + 1 >= cap)
				return -1;
			out[(*o)++] = (char)c;
		} else {
			if (*o + 3 >= cap)
				return -1;
			out[(*o)++] = '%';
			out[(*o)++] = hex[c >> 4];
			out[(*o)++] = hex[c & 15];
		}
	}
	out[*o] = 0;
	return 0;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes %XX (and, in a query, '+' stays '+': S3 reads it as itself). */
static size_t dec(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
			out[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
			i += 2;
		} else {
			out[o++] = s[i];
		}
	}
	out[o] = 0;
	return o;
}

/* ---- the canonical request ---- */

struct qp {
	char name[512], value[1024];
};

static int cmp_qp(const void *a, const void *b)
{
	const struct qp *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

static int canonical_query(const char *q, char *out, size_t cap)
{
	struct qp v[64];
	size_t n = 0, o = 0;
	const char *p = q;

	out[0] = 0;
	while (*p) {
		const char *amp = strchr(p, '&'), *end = amp ? amp : p + strlen(p);
		const char *eq = memchr(p, '=', (size_t)(end - p));
		char raw[1024];
		size_t l;

		if (end > p) {
			if (n == 64)
				return -1;
			l = dec(p, (size_t)((eq ? eq : end) - p), raw, sizeof(raw));
			v[n].name[0] = 0;
			{
				size_t oo = 0;
				if (enc(v[n].name, sizeof(v[n].name), &oo, raw, l, 0))
					return -1;
			}
			l = eq ? dec(eq + 1, (size_t)(end - eq - 1), raw, sizeof(raw)) : 0;
			raw[l] = 0;
			{
				size_t oo = 0;
				v[n].value[0] = 0;
				if (enc(v[n].value, sizeof(v[n].value), &oo, raw, l, 0))
					return -1;
			}
			n++;
		}
		p = amp ? amp + 1 : end;
	}
	qsort(v, n, sizeof(v[0]), cmp_qp);
	for (size_t i = 0; i < n; i++) {
		int w = snprintf(out + o, cap - o, "%s%s=%s", i ? "&" : "", v[i].name, v[i].value);
		if (w < 0 || (size_t)w >= cap - o)
			return -1;
		o += (size_t)w;
	}
	return 0;
}

/* A header's value as signed: trimmed, inner runs of spaces as one. */
static size_t header_value(const char *v, char *out, size_t cap)
{
	size_t o = 0;
	int space = 0;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v && o + 1 < cap; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space && o)
			out[o++] = ' ';
		space = 0;
		if (o + 1 < cap)
			out[o++] = *v;
	}
	out[o] = 0;
	return o;
}

int tu_sigv4_canonical(const struct tu_sigv4_req *r, const char *signed_headers,
		       const char *payload_hash, char *out, size_t cap)
{
	char q[8192], names[1024], *save = NULL, *name;
	size_t o = 0;
	int w;

	w = snprintf(out, cap, "%s\n", r->method);
	if (w < 0 || (size_t)w >= cap)
		return -1;
	o = (size_t)w;
	if (enc(out, cap, &o, r->path[0] ? r->path : "/", r->path[0] ? strlen(r->path) : 1, 1) ||
	    canonical_query(r->query, q, sizeof(q)))
		return -1;
	w = snprintf(out + o, cap - o, "\n%s\n", q);
	if (w < 0 || (size_t)w >= cap - o)
		return -1;
	o += (size_t)w;
	snprintf(names, sizeof(names), "%s", signed_headers);
	for (name = strtok_r(names, ";", &save); name; name = strtok_r(NULL, ";", &save)) {
		int first = 1;

		w = snprintf(out + o, cap - o, "%s:", name);
		if (w < 0 || (size_t)w >= cap - o)
			return -1;
		o += (size_t)w;
		for (int i = 0; i < r->nh; i++) {
			char v[1024];
			if (strcasecmp(r->h[i].name, name))
				continue;
			header_value(r->h[i].value, v, sizeof(v));
			w = snprintf(out + o, cap - o, "%s%s", first ? "" : ",", v);
			if (w < 0 || (size_t)w >= cap - o)
				return -1;
			o += (size_t)w;
			first = 0;
		}
		if (o + 1 >= cap)
			return -1;
		out[o++] = '\n';
		out[o] = 0;
	}
	w = snprintf(out + o, cap - o, "\n%s\n%s", signed_headers, payload_hash);
	return w < 0 || (size_t)w >= cap - o ? -1 : 0;
}

static void sha256_hex(const void *d, size_t n, char out[65])
{
	unsigned char h[SHA256_DIGEST_LENGTH];

	SHA256(d, n, h);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

void tu_sigv4_string_to_sign(const char *amz_date, const char *scope, const char *canonical,
			     char *out, size_t cap)
{
	char h[65];

	sha256_hex(canonical, strlen(canonical), h);
	snprintf(out, cap, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, scope, h);
}

static void hmac(const void *key, size_t kl, const char *msg, unsigned char out[32])
{
	unsigned int ol = 32;

	HMAC(EVP_sha256(), key, (int)kl, (const unsigned char *)msg, strlen(msg), out, &ol);
}

void tu_sigv4_signature(const char *secret, const char *date, const char *region,
			const char *service, const char *sts, char out[65])
{
	char k0[160];
	unsigned char a[32], b[32];

	snprintf(k0, sizeof(k0), "AWS4%s", secret);
	hmac(k0, strlen(k0), date, a);
	hmac(a, 32, region, b);
	hmac(b, 32, service, a);
	hmac(a, 32, "aws4_request", b);
	hmac(b, 32, sts, a);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", a[i]);
}

/* ---- verification ---- */

static const char *header(const struct tu_sigv4_req *r, const char *name)
{
	for (int i = 0; i < r->nh; i++)
		if (!strcasecmp(r->h[i].name, name))
			return r->h[i].value;
	return NULL;
}

/* Says why, with S3's error code, and refuses. */
#define REFUSE(c, ...) (snprintf(code, cc, "%s", c), snprintf(why, wc, __VA_ARGS__), -1)

/* Seconds since the epoch of "YYYYMMDDTHHMMSSZ", or -1. */
static long long amz_time(const char *s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (!s || strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z' ||
	    sscanf(s, "%4d%2d%2dT%2d%2d%2dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
		   &tm.tm_min, &tm.tm_sec) != 6)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (long long)timegm(&tm);
}

int tu_sigv4_verify(const struct tu_sigv4_req *r, const char *access, const char *secret,
		    char *code, size_t cc, char *why, size_t wc)
{
	const char *auth = header(r, "authorization"), *date = header(r, "x-amz-date");
	const char *sha = header(r, "x-amz-content-sha256");
	char cred[256], sh[1024], sig[128], akey[128], day[16], region[64], service[64];
	char canonical[16384], sts[1024], want[65], scope[256], body_hash[65], names[1024];
	char *save = NULL, *n;
	long long t;

	if (!auth || strncmp(auth, "AWS4-HMAC-SHA256 ", 17))
		return REFUSE("AccessDenied", "no AWS4-HMAC-SHA256 "
			      "Authorization header");
	{
		const char *c = strstr(auth, "Credential="), *s = strstr(auth, "SignedHeaders="),
			   *g = strstr(auth, "Signature=");
		if (!c || !s || !g || sscanf(c, "Credential=%255[^,]", cred) != 1 ||
		    sscanf(s, "SignedHeaders=%1023[^,]", sh) != 1 ||
		    sscanf(g, "Signature=%127[0-9a-f]", sig) != 1)
			return REFUSE("AuthorizationHeaderMalformed", "Authorization: %s", auth);
	}
	if (sscanf(cred, "%127[^/]/%15[^/]/%63[^/]/%63[^/]/aws4_request", akey, day, region,
		   service) != 4)
		return REFUSE("AuthorizationHeaderMalformed", "credential %s",
			      cred);
	if (strcmp(akey, access))
		return REFUSE("InvalidAccessKeyId", "unknown access key %s",
			      akey);
	if (strcmp(service, "s3"))
		return REFUSE("AuthorizationHeaderMalformed", "service %s, "
			      "not s3", service);
	if (!date || (t = amz_time(date)) < 0 || strncmp(date, day, 8))
		return REFUSE("AccessDenied", "x-amz-date %s missing or not "
			      "the credential's day", date ? date : "(none)");
	if (llabs((long long)time(NULL) - t) > 900)
		return REFUSE("RequestTimeTooSkewed", "x-amz-date %s is more "
			      "than 15 minutes off", date);
	/* Every header the signature covers must be in the request: a
	 * header signed and not sent (an empty "Expect:") never matches
	 * what S3 computes. */
	snprintf(names, sizeof(names), "%s", sh);
	for (n = strtok_r(names, ";", &save); n; n = strtok_r(NULL, ";", &save)) {
		const char *v = header(r, n);
		if (!v)
			return REFUSE("SignatureDoesNotMatch", "signed header "
				      "'%s' is not in the request", n);
		if (!*v)
			return REFUSE("SignatureDoesNotMatch", "signed header "
				      "'%s' is empty", n);
	}
	if (!strstr(sh, "host") || !strstr(sh, "x-amz-date") || !strstr(sh, "x-amz-content-sha256"))
		return REFUSE("AccessDenied", "host, x-amz-date and "
			      "x-amz-content-sha256 must be signed (%s)", sh);
	sha256_hex(r->body ? (const void *)r->body : (const void *)"", r->body_len, body_hash);
	if (!sha || (strcmp(sha, "UNSIGNED-PAYLOAD") && strcmp(sha, body_hash)))
		return REFUSE("XAmzContentSHA256Mismatch", "the payload's "
			      "SHA-256 is not x-amz-content-sha256 (%s)", sha ? sha : "(none)");
	if (tu_sigv4_canonical(r, sh, sha, canonical, sizeof(canonical)))
		return REFUSE("AccessDenied", "request too large");
	snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", day, region, service);
	tu_sigv4_string_to_sign(date, scope, canonical, sts, sizeof(sts));
	tu_sigv4_signature(secret, day, region, service, sts, want);
	if (strcmp(want, sig))
		return REFUSE("SignatureDoesNotMatch", "the signature is not "
			      "the one this request's canonical form makes under the secret");
	return 0;
}

/* ---- the proxy ---- */

/* The request in head (and body) as the verifier reads it. */
static int parse_request(char *head, const unsigned char *body, size_t blen,
			 struct tu_sigv4_req *r)
{
	char target[8192], *line, *save = NULL, *q;

	memset(r, 0, sizeof(*r));
	if (sscanf(head, "%15s %8191s", r->method, target) != 2)
		return -1;
	q = strchr(target, '?');
	if (q) {
		*q = 0;
		snprintf(r->query, sizeof(r->query), "%s", q + 1);
	}
	dec(target, strlen(target), r->path, sizeof(r->path));
	line = strtok_r(strstr(head, "\r\n") + 2, "\r\n", &save);
	for (; line && r->nh < TU_SIGV4_HEADERS; line = strtok_r(NULL, "\r\n", &save)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = 0;
		snprintf(r->h[r->nh].name, sizeof(r->h[r->nh].name), "%s", line);
		/* Without the optional whitespace HTTP allows around it. */
		{
			const char *v = colon + 1;
			size_t l;
			while (*v == ' ' || *v == '\t')
				v++;
			l = strlen(v);
			while (l && (v[l - 1] == ' ' || v[l - 1] == '\t'))
				l--;
			snprintf(r->h[r->nh].value, sizeof(r->h[r->nh].value), "%.*s", (int)l, v);
		}
		*colon = ':';
		r->nh++;
	}
	r->body = body;
	r->body_len = blen;
	return 0;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);
		if (w <= 0)
			return;
		c += w;
		n -= (size_t)w;
	}
}

/* Sends head (with Connection: close) and body upstream and relays the
 * answer back to fd. */
static void forward(int fd, int port, const char *head, const unsigned char *body, size_t blen)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char buf[65536];
	const char *line = head;
	ssize_t r;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (up < 0 || connect(up, (struct sockaddr *)&a, sizeof(a)) < 0) {
		static const char bad[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
					  "Connection: close\r\n\r\n";
		write_all(fd, bad, sizeof(bad) - 1);
		if (up >= 0)
			close(up);
		return;
	}
	/* The head without its Connection and Expect lines. */
	while (*line) {
		const char *eol = strstr(line, "\r\n");
		size_t l = eol ? (size_t)(eol - line) + 2 : strlen(line);
		if (strncasecmp(line, "connection:", 11) && strncasecmp(line, "expect:", 7))
			write_all(up, line, l);
		line += l;
	}
	write_all(up, "Connection: close\r\n\r\n", 21);
	if (blen)
		write_all(up, body, blen);
	while ((r = read(up, buf, sizeof(buf))) > 0)
		write_all(fd, buf, (size_t)r);
	close(up);
}

struct conn {
	struct tu_sigv4_proxy *p;
	int fd;
};

/* One connection, one request (every answer says Connection: close). */
static void *serve_one(void *arg)
{
	struct conn *c = arg;
	struct tu_sigv4_proxy *p = c->p;
	char *head = malloc(65536), *copy = malloc(65536);
	struct tu_sigv4_req *req = malloc(sizeof(*req));
	unsigned char *body = NULL;
	size_t blen;

	if (head && copy && req && tu_http_read_request(c->fd, head, 65536, &body, &blen) == 0) {
		char code[64] = "AccessDenied", why[400] = "not an HTTP request";
		snprintf(copy, 65536, "%s", head);
		if (parse_request(copy, body, blen, req) == 0 &&
		    tu_sigv4_verify(req, p->access, p->secret, code, sizeof(code), why,
				    sizeof(why)) == 0) {
			atomic_fetch_add(&p->accepted, 1);
			forward(c->fd, p->upstream_port, head, body, blen);
		} else {
			char out[1024], hdr[256];
			bool head_only = !strncmp(head, "HEAD ", 5);
			int n = snprintf(out, sizeof(out), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
					 "\n<Error><Code>%s</Code><Message>%s</Message></Error>",
					 code, why);
			int hn = snprintf(hdr, sizeof(hdr), "HTTP/1.1 403 Forbidden\r\nContent-Type: "
					  "application/xml\r\nContent-Length: %d\r\nConnection: "
					  "close\r\n\r\n", head_only ? 0 : n);
			atomic_fetch_add(&p->refused, 1);
			pthread_mutex_lock(&p->mu);
			snprintf(p->last_refusal, sizeof(p->last_refusal), "%s: %s", code, why);
			pthread_mutex_unlock(&p->mu);
			write_all(c->fd, hdr, (size_t)hn);
			if (!head_only)
				write_all(c->fd, out, (size_t)n);
		}
	}
	free(body);
	free(head);
	free(copy);
	free(req);
	close(c->fd);
	atomic_fetch_sub(&p->live, 1);
	free(c);
	return NULL;
}

static void *serve(void *arg)
{
	struct tu_sigv4_proxy *p = arg;

	while (!atomic_load(&p->stop)) {
		struct pollfd pf = { p->lfd, POLLIN, 0 };
		struct conn *c;
		pthread_t th;
		int fd;

		if (poll(&pf, 1, 20) <= 0 || (fd = accept(p->lfd, NULL, NULL)) < 0)
			continue;
		if (!(c = malloc(sizeof(*c)))) {
			close(fd);
			continue;
		}
		c->p = p;
		c->fd = fd;
		atomic_fetch_add(&p->live, 1);
		if (pthread_create(&th, NULL, serve_one, c)) {
			atomic_fetch_sub(&p->live, 1);
			close(fd);
			free(c);
			continue;
		}
		pthread_detach(th);
	}
	return NULL;
}

int tu_sigv4_proxy_start(struct tu_sigv4_proxy *p, int upstream_port, const char *access,
			 const char *secret)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	memset(p, 0, sizeof(*p));
	p->upstream_port = upstream_port;
	snprintf(p->access, sizeof(p->access), "%s", access);
	snprintf(p->secret, sizeof(p->secret), "%s", secret);
	pthread_mutex_init(&p->mu, NULL);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(p->lfd, 64) < 0 ||
	    getsockname(p->lfd, (struct sockaddr *)&a, &al) < 0) {
		if (p->lfd >= 0)
			close(p->lfd);
		return -1;
	}
	p->port = ntohs(a.sin_port);
	if (pthread_create(&p->th, NULL, serve, p)) {
		close(p->lfd);
		return -1;
	}
	return 0;
}

void tu_sigv4_proxy_stop(struct tu_sigv4_proxy *p)
{
	if (!p->port)
		return;
	atomic_store(&p->stop, 1);
	pthread_join(p->th, NULL);
	close(p->lfd);
	/* The connections still being served end on their own (each has one
	 * request to answer, bounded by the upstream's answer). */
	while (atomic_load(&p->live) > 0)
		usleep(1000);
	pthread_mutex_destroy(&p->mu);
	p->port = 0;
}

void tu_sigv4_proxy_last(struct tu_sigv4_proxy *p, char *out, size_t n)
{
	pthread_mutex_lock(&p->mu);
	snprintf(out, n, "%s", p->last_refusal);
	pthread_mutex_unlock(&p->mu);
}
