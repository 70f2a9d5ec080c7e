/*
 * The redis backend's bound on what a server's reply may make this
 * process hold: hiredis's reply functions, counting (redis_private.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "broker/storage/redis/redis_private.h"

/*
 * What a server may make this process hold (issue 34, item 9).  hiredis
 * 0.14 reserves an array's whole element table from its header ("*N"),
 * so twelve bytes from a hostile or broken server asked for gigabytes,
 * and it buffers a bulk string of any announced length until it is all
 * there.  Every connection's reader builds replies through the functions
 * below, which count one reply's elements and string bytes (in the
 * thread parsing it: a reply is parsed by one thread, its top element
 * first) and refuse past TSEC__RD_ELEMENTS_MAX or TSEC__RD_REPLY_MAX;
 * tsec__rd_reply bounds the bytes waiting for one unfinished element.
 * hiredis reports a refusal as "Out of memory"; rd_lost names it.
 */
static _Thread_local size_t reply_elems, reply_bytes;
static _Thread_local bool reply_over;
static redisReplyObjectFunctions *plain;     /* hiredis's own (read-only) */
static redisReplyObjectFunctions capped;
static pthread_once_t capped_once = PTHREAD_ONCE_INIT;

static bool within(const redisReadTask *t, size_t elems, size_t bytes)
{
	if (!t->parent) {            /* a new reply */
		reply_elems = 0;
		reply_bytes = 0;
		reply_over = false;
	}
	reply_elems += elems;
	reply_bytes += bytes;
	if (reply_elems > TSEC__RD_ELEMENTS_MAX || reply_bytes > TSEC__RD_REPLY_MAX)
		reply_over = true;
	return !reply_over;
}

static void *cap_string(const redisReadTask *t, char *str, size_t len)
{
	return within(t, 1, len) ? plain->createString(t, str, len) : NULL;
}

static void *cap_array(const redisReadTask *t, int n)
{
	return within(t, 1 + (n > 0 ? (size_t)n : 0), 0) ? plain->createArray(t, n) : NULL;
}

static void *cap_integer(const redisReadTask *t, long long v)
{
	return within(t, 1, 0) ? plain->createInteger(t, v) : NULL;
}

static void *cap_nil(const redisReadTask *t)
{
	return within(t, 1, 0) ? plain->createNil(t) : NULL;
}

static void capped_init(void)
{
	redisReader *rd = redisReaderCreate();

	if (!rd)
		return;
	plain = rd->fn;
	redisReaderFree(rd);
	if (plain)
		capped = (redisReplyObjectFunctions){ cap_string, cap_array, cap_integer, cap_nil,
						      plain->freeObject };
}

/* Gives c's reader the counting functions; false if it cannot. */
bool tsec__rd_cap(redisContext *c)
{
	pthread_once(&capped_once, capped_init);
	if (!plain || !c->reader || c->reader->fn != plain)
		return false;
	c->reader->fn = &capped;
	return true;
}

bool tsec__rd_refused_reply(const redisContext *c)
{
	return c->err == REDIS_ERR_OOM && reply_over;
}

void tsec__rd_refuse(redisContext *c)
{
	reply_over = true;
	c->err = REDIS_ERR_OOM;
	snprintf(c->errstr, sizeof(c->errstr), "reply too large");
}
