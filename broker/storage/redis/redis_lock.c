/*
 * The redis backend's locks (scripts on P/l/<name> and P/f/<name>; the
 * server's clock ends a lease) and its invalidation feed (SUBSCRIBE
 * P/inval, proven live by PING within the cache's bound).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "broker/storage/redis/redis_private.h"
#include "common/clock.h"
#include "broker/storage/lease.h"

/*
 * How long redis keeps a lease of ttl_ms: longer than its holder is told,
 * by ttl / 50 + TSEC__RD_LEASE_MARGIN_MS.  Redis ends a key by its host's
 * wall clock, and a step of that clock forward (NTP, a VM's clock sync)
 * ends every lease early by the step, while the holder counts its lease
 * on its own monotonic clock, which no step moves.  The margin absorbs
 * such a step (2.2 ms in one second was seen in CI) at the cost of a dead
 * holder's lock freeing that much later.  A larger step still ends leases
 * early (docs/fleet.md).
 */
static void server_ttl(uint64_t ttl_ms, char out[24], size_t *len)
{
	uint64_t t = ttl_ms > INT64_MAX / 4 ? INT64_MAX / 4 : ttl_ms;

	*len = (size_t)snprintf(out, 24, "%llu",
				(unsigned long long)(t + t / 50 + TSEC__RD_LEASE_MARGIN_MS));
}

int tsec__rd_lock_try(struct tsec__backend *b, const char *name, uint64_t ttl_ms,
		       const uint8_t *waiter, struct tsec__lease *out, struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	char ttl[24];
	uint8_t token[16];
	const char *args[4] = { name, (const char *)token, ttl, (const char *)waiter };
	size_t lens[4] = { strlen(name), 16, 0, waiter ? 16 : 0 };
	int64_t now = tsec__wall_ms();
	redisReply *rep;

	if (!waiter)
		args[3] = "";            /* a try: served only when nobody waits */
	randombytes_buf(token, sizeof(token));
	server_ttl(ttl_ms, ttl, &lens[2]);
	/* Safe to resend: the script knows its own grant by the token (and
	 * a waiter asking twice keeps its place). */
	if (!(rep = tsec__rd_script(r, S_ACQUIRE, 4, args, lens, true, err)))
		return TSEC_EIO;
	if (rep->type != REDIS_REPLY_INTEGER) {
		freeReplyObject(rep);
		return tsec__seterr(err, TSEC_EBUSY, name, "lock '%s' is held or waited for",
				    name);
	}
	out->fence = (uint64_t)rep->integer;
	memcpy(out->token, token, sizeof(token));
	out->expires_ms = tsec__deadline_after(now, ttl_ms);
	freeReplyObject(rep);
	return 0;
}

void tsec__rd_lock_unwait(struct tsec__backend *b, const char *name, const uint8_t waiter[16])
{
	const char *args[2] = { name, (const char *)waiter };
	size_t lens[2] = { strlen(name), 16 };
	struct tsec_error ignored;
	redisReply *rep;

	/* (Unanswered, the waiter is dropped once it stops asking.) */
	if ((rep = tsec__rd_script(tsec__rd_rb_of(b), S_UNWAIT, 2, args, lens, true, &ignored)))
		freeReplyObject(rep);
}

int tsec__rd_lock_renew(struct tsec__backend *b, const char *name, const uint8_t token[16],
			 uint64_t ttl_ms, int64_t *expires_ms, struct tsec_error *err)
{
	char ttl[24];
	const char *args[3] = { name, (const char *)token, ttl };
	size_t lens[3] = { strlen(name), 16, 0 };
	int64_t now = tsec__wall_ms();
	redisReply *rep;
	int rc;

	server_ttl(ttl_ms, ttl, &lens[2]);
	if (!(rep = tsec__rd_script(tsec__rd_rb_of(b), S_RENEW, 3, args, lens, true, err)))
		return TSEC_EIO;
	if (!(rc = tsec__rd_verdict(rep, name, err)))
		*expires_ms = tsec__deadline_after(now, ttl_ms);
	freeReplyObject(rep);
	return rc;
}

int tsec__rd_lock_release(struct tsec__backend *b, const char *name, const uint8_t token[16],
			   struct tsec_error *err)
{
	const char *args[2] = { name, (const char *)token };
	size_t lens[2] = { strlen(name), 16 };
	redisReply *rep;
	int rc;

	if (!(rep = tsec__rd_script(tsec__rd_rb_of(b), S_RELEASE, 2, args, lens, false, err)))
		return tsec__rd_failed(err);
	rc = tsec__rd_verdict(rep, name, err);
	freeReplyObject(rep);
	return rc;
}

/* ---- the invalidation feed: SUBSCRIBE P/inval ---- */

/* One message of the feed: a list of keys, or "*" for everything. */
static void on_message(struct redisbe *r, const redisReply *m)
{
	char *s = strndup(m->str, m->len), *save = NULL;

	for (char *k = s ? strtok_r(s, "\n", &save) : NULL; k; k = strtok_r(NULL, "\n", &save))
		tsec__feed_changed(&r->sink, strcmp(k, "*") ? k : NULL);
	if (!s)
		tsec__feed_changed(&r->sink, NULL);
	free(s);
}

bool tsec__rd_is_kind(const redisReply *rep, const char *kind)
{
	return rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
	       rep->element[0]->type == REDIS_REPLY_STRING &&
	       !strcmp(rep->element[0]->str, kind);
}

/*
 * Subscribes on c and reads the feed until it fails or stops: a PING
 * every bound / 3 on the subscription itself, whose pong proves every
 * message published before the ping was delivered (redis answers in
 * order); no pong within the bound is a half-open connection.  Returns
 * why it ended (NULL when stopped).
 */
static const char *subscribed(struct redisbe *r, redisContext *c, const char *chan,
			      char *why, size_t whylen, bool *was_live)
{
	uint32_t bound = tsec__feed_bound(&r->sink);
	int64_t ping_at = 0, next_ping = 0;
	redisReply *rep;

	rep = tsec__rd_command(c, 2, (const char *[]){ "SUBSCRIBE", chan }, NULL);
	if (!tsec__rd_is_kind(rep, "subscribe")) {
		snprintf(why, whylen, "SUBSCRIBE %.64s: %.100s", chan,
			 rep && rep->type == REDIS_REPLY_ERROR ? rep->str :
			 c->err ? c->errstr : "unexpected answer");
		freeReplyObject(rep);
		return why;
	}
	freeReplyObject(rep);
	/* Subscribed: whatever was cached before may be stale. */
	tsec__feed_changed(&r->sink, NULL);
	while (atomic_load(&r->feed_on)) {
		int64_t now = tsec__mono_ms();
		struct pollfd pf = { .fd = c->fd, .events = POLLIN };
		void *got = NULL;

		if (ping_at && now - ping_at >= bound) {
			snprintf(why, whylen, "no answer to a PING on the subscription in %u ms",
				 bound);
			return why;
		}
		if (!ping_at && now >= next_ping) {
			ping_at = now;
			redisAppendCommand(c, "PING");
			if (tsec__rd_write(c) != REDIS_OK)
				goto broken;
		}
		if (redisGetReplyFromReader(c, &got) != REDIS_OK)
			goto broken;
		if (!got) {
			int64_t wake = ping_at ? ping_at + bound : next_ping;

			/* Bounded as every reply is (tsec__rd_reply). */
			if (c->reader->len - c->reader->pos > TSEC__RD_BULK_MAX) {
				snprintf(why, whylen, "a message larger than this client takes");
				return why;
			}
			if ((tsec__rd_pending(c) ||
			     poll(&pf, 1, (int)(wake > now ? (wake - now < 100 ? wake - now : 100)
							 : 0)) > 0) &&
			    tsec__rd_read(c) != REDIS_OK)
				goto broken;
			continue;
		}
		rep = got;
		if (tsec__rd_is_kind(rep, "message") && rep->elements == 3 &&
		    rep->element[2]->type == REDIS_REPLY_STRING) {
			on_message(r, rep->element[2]);
		} else if (tsec__rd_is_kind(rep, "pong") && ping_at) {
			tsec__feed_alive(&r->sink, ping_at);
			*was_live = true;
			ping_at = 0;
			next_ping = tsec__mono_ms() + bound / 3;
		}
		freeReplyObject(rep);
	}
	return NULL;
broken:
	if (!atomic_load(&r->feed_on))
		return NULL;
	snprintf(why, whylen, "the subscription broke: %.120s", c->errstr);
	return why;
}

static void *feed(void *arg)
{
	struct redisbe *r = arg;
	char chan[TSEC_KEY_MAX + 8], why[192];
	long backoff = 10;

	snprintf(chan, sizeof(chan), "%s/inval", r->prefix);
	{
		sigset_t sp;                 /* for this thread's life (nopipe_on) */

		sigemptyset(&sp);
		sigaddset(&sp, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &sp, NULL);
	}
	while (atomic_load(&r->feed_on)) {
		struct tsec_error err = { 0 };
		redisContext *c = tsec__rd_dial(r, &err);
		const char *lost = err.msg;
		bool was_live = false;

		if (c) {
			pthread_mutex_lock(&r->mu);
			r->feed_ctx = c;
			pthread_mutex_unlock(&r->mu);
			if (!atomic_load(&r->feed_on))
				shutdown(c->fd, SHUT_RDWR);
			lost = subscribed(r, c, chan, why, sizeof(why), &was_live);
			if (was_live)
				backoff = 10;
			pthread_mutex_lock(&r->mu);
			r->feed_ctx = NULL;
			pthread_mutex_unlock(&r->mu);
			tsec__rd_free(c);
		}
		if (!atomic_load(&r->feed_on))
			break;
		/* Missed messages: drop all, serve no hit until proven again. */
		tsec__feed_dead(&r->sink, lost);
		tsec__sleep_ns((uint64_t)backoff * 1000000u);
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	return NULL;
}

int tsec__redis_feed(struct tsec__backend *b, const struct tsec__feed_sink *sink,
		     struct tsec_error *err)
{
	struct redisbe *r = tsec__rd_rb_of(b);
	int rc;

	r->sink = *sink;
	atomic_store(&r->feed_on, true);
	if ((rc = pthread_create(&r->feed, NULL, feed, r))) {
		atomic_store(&r->feed_on, false);
		return tsec__seterr(err, TSEC_EIO, "", "cannot start the redis feed: %s",
				    strerror(rc));
	}
	return 0;
}
