/* What the libcurl users share (http.h). */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/http.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int tsec__http_global(struct tsec_error *err)
{
	pthread_once(&once, global_init);
	if (global_rc != CURLE_OK)
		return tsec__seterr(err, TSEC_EIO, "", "libcurl failed to initialise: %s",
				    curl_easy_strerror(global_rc));
	return 0;
}

void tsec__http_pool_init(struct tsec__http_pool *p)
{
	pthread_mutex_init(&p->mu, NULL);
	p->n = 0;
}

void tsec__http_pool_destroy(struct tsec__http_pool *p)
{
	for (size_t i = 0; i < p->n; i++)
		curl_easy_cleanup(p->h[i]);
	p->n = 0;
	pthread_mutex_destroy(&p->mu);
}

CURL *tsec__http_take(struct tsec__http_pool *p)
{
	CURL *h = NULL;

	pthread_mutex_lock(&p->mu);
	if (p->n)
		h = p->h[--p->n];
	pthread_mutex_unlock(&p->mu);
	if (!h)
		return curl_easy_init();
	curl_easy_reset(h);               /* options go; the connection stays */
	return h;
}

void tsec__http_give(struct tsec__http_pool *p, CURL *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&p->mu);
	if (p->n < TSEC__HTTP_POOL) {
		p->h[p->n++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&p->mu);
	if (h)
		curl_easy_cleanup(h);
}

size_t tsec__http_on_body(char *d, size_t sz, size_t nm, void *ud)
{
	struct tsec__http_body *b = ud;
	size_t n = sz * nm;

	if (n > b->max || b->n + n + 1 > b->max) {
		b->over = true;
		return 0;                /* too big an answer: fail the transfer */
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *np;

		while (cap < b->n + n + 1)
			cap *= 2;
		if (!(np = realloc(b->p, cap)))
			return 0;
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

void tsec__http_body_wipe(struct tsec__http_body *b)
{
	if (b->p)
		sodium_memzero(b->p, b->cap);
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

void tsec__http_defaults(CURL *h, long timeout_ms, long connect_ms, const char *ca)
{
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	if (timeout_ms > 0)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	if (connect_ms > 0)
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
	if (ca && *ca)
		curl_easy_setopt(h, CURLOPT_CAINFO, ca);
}
