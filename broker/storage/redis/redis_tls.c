/*
 * TLS to redis.  Debian 12's hiredis (0.14) has none (hiredis_ssl came
 * with 1.0), so hiredis keeps the jobs it does well, formatting commands
 * into c->obuf and parsing replies with its reader, and the bytes travel
 * here: through OpenSSL on the connection's socket when the backend has
 * a TLS context, through hiredis's own read and write when it has not.
 * The connection's SSL rides in its reader's privdata, which nothing
 * else uses (the reply functions in redis.c ignore it).
 *
 * Every byte of every connection, the feed's included, goes through
 * tsec__rd_write and tsec__rd_read; a context is freed with tsec__rd_free.
 * Errors are set on the context as hiredis sets them (c->err, c->errstr,
 * errno EAGAIN when the socket's timeout passed), so the callers' checks
 * (tsec__rd_timed_out, tsec__rd_lost) read TLS and plain alike.
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <hiredis/sds.h>

#include "broker/storage/redis/redis_private.h"

static SSL *ssl_of(const redisContext *c)
{
	return c && c->reader ? c->reader->privdata : NULL;
}

int tsec__rd_tls_open(struct redisbe *r, const char *ca, const char *cert, const char *key,
		      struct tsec_error *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	unsigned long e;

	if (!ctx)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if ((ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL)
		: SSL_CTX_set_default_verify_paths(ctx)) != 1)
		goto bad;
	if ((cert || key) && (!cert || !key ||
			      SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
			      SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
			      SSL_CTX_check_private_key(ctx) != 1))
		goto bad;
	r->tls = ctx;
	return 0;
bad:
	e = ERR_get_error();
	SSL_CTX_free(ctx);
	ERR_clear_error();
	return tsec__seterr(err, TSEC_EINVAL, "tls", "redis TLS: %s%s%s", (cert || key) &&
			    (!cert || !key) ? "tls_cert and tls_key go together" : "cannot load "
			    "tls_ca, tls_cert or tls_key: ", (cert || key) && (!cert || !key) ? ""
			    : ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "unknown",
			    "");
}

void tsec__rd_tls_close(struct redisbe *r)
{
	SSL_CTX_free(r->tls);
	r->tls = NULL;
}

/* The error of a failed SSL call on c, set as hiredis would. */
/*
 * Whether SSL_read or SSL_write returned n only because a signal
 * interrupted its read() or write(): the same call is made again, as
 * hiredis does for a plain socket.  A host's signals are not ours to
 * fail on (Go's runtime preempts threads with SIGURG; issue 35).  Seen
 * as "want read/write" (the socket BIO retries EINTR) or a system
 * error, with errno EINTR either way; a timeout leaves EAGAIN.
 */
static bool interrupted(SSL *s, int n)
{
	int e = errno, code = SSL_get_error(s, n);

	if (e != EINTR || (code != SSL_ERROR_WANT_READ && code != SSL_ERROR_WANT_WRITE &&
			   code != SSL_ERROR_SYSCALL))
		return false;
	ERR_clear_error();
	return true;
}

static void failed(redisContext *c, SSL *s, int n)
{
	int e = errno, code = SSL_get_error(s, n);
	unsigned long q = ERR_get_error();

	ERR_clear_error();
	if (code == SSL_ERROR_ZERO_RETURN || (code == SSL_ERROR_SYSCALL && !q && !e)) {
		c->err = REDIS_ERR_EOF;
		snprintf(c->errstr, sizeof(c->errstr), "Server closed the connection");
		return;
	}
	c->err = REDIS_ERR_IO;
	if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) {
		snprintf(c->errstr, sizeof(c->errstr), "Resource temporarily unavailable");
		errno = EAGAIN;          /* the socket's timeout passed */
		return;
	}
	snprintf(c->errstr, sizeof(c->errstr), "TLS: %s",
		 q && ERR_reason_error_string(q) ? ERR_reason_error_string(q)
						 : e ? strerror(e) : "failed");
	errno = e ? e : EIO;
}

int tsec__rd_tls_start(struct redisbe *r, redisContext *c, struct tsec_error *err)
{
	SSL *s;
	X509_VERIFY_PARAM *vp;
	unsigned char ip[16];
	int n;

	if (!r->tls)
		return 0;
	if (!(s = SSL_new(r->tls)))
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	/* The certificate must name the host dialled: its IP address, or
	 * its DNS name (and SNI then). */
	vp = SSL_get0_param(s);
	if (inet_pton(AF_INET, r->host, ip) == 1 || inet_pton(AF_INET6, r->host, ip) == 1) {
		X509_VERIFY_PARAM_set1_ip_asc(vp, r->host);
	} else {
		X509_VERIFY_PARAM_set1_host(vp, r->host, 0);
		SSL_set_tlsext_host_name(s, r->host);
	}
	SSL_set_fd(s, c->fd);
	c->reader->privdata = s;
	while ((n = SSL_connect(s)) != 1 && interrupted(s, n))
		;
	if (n != 1) {
		long v = SSL_get_verify_result(s);

		failed(c, s, n);
		return tsec__seterr(err, TSEC_EIO, r->host, "redis at %s: TLS handshake: %s",
				    r->host, v != X509_V_OK ? X509_verify_cert_error_string(v)
							   : c->errstr);
	}
	return 0;
}

void tsec__rd_free(redisContext *c)
{
	SSL *s = ssl_of(c);

	if (s) {
		c->reader->privdata = NULL;
		SSL_free(s);             /* no close_notify: the socket closes next */
	}
	redisFree(c);
}

int tsec__rd_write(redisContext *c)
{
	SSL *s = ssl_of(c);
	int done = 0;

	if (!s) {
		while (!done)
			if (redisBufferWrite(c, &done) != REDIS_OK)
				return REDIS_ERR;
		return REDIS_OK;
	}
	while (sdslen(c->obuf) > 0) {
		int n = SSL_write(s, c->obuf, (int)(sdslen(c->obuf) > INT32_MAX ? INT32_MAX
						  : sdslen(c->obuf)));

		if (n <= 0 && interrupted(s, n))
			continue;
		if (n <= 0) {
			failed(c, s, n);
			return REDIS_ERR;
		}
		sdsrange(c->obuf, n, -1);
	}
	return REDIS_OK;
}

int tsec__rd_read(redisContext *c)
{
	SSL *s = ssl_of(c);
	char buf[16384];
	int n;

	if (!s)
		return redisBufferRead(c);
	while ((n = SSL_read(s, buf, sizeof(buf))) <= 0) {
		if (interrupted(s, n))
			continue;
		failed(c, s, n);
		return REDIS_ERR;
	}
	if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
		c->err = c->reader->err;
		snprintf(c->errstr, sizeof(c->errstr), "%s", c->reader->errstr);
		return REDIS_ERR;
	}
	return REDIS_OK;
}

bool tsec__rd_pending(const redisContext *c)
{
	SSL *s = ssl_of(c);

	return s && SSL_pending(s) > 0;
}
