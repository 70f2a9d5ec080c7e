/*
 * Internal: the lease rules every backend applies (lease.c), so that a
 * lock means the same over files, memory, etcd and redis.
 */
#ifndef TSEC_STORAGE_LEASE_H
#define TSEC_STORAGE_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/storage/backend.h"

/*
 * A lock's state as a backend keeps it.  Its times are on the clock the
 * backend judges leases by, never the wall clock (which steps and which
 * another process may read an hour apart): the boot clock on the file
 * store, the monotonic clock in memory.
 */
struct tsec__lease_state {
	uint8_t token[16];           /* all zero: free */
	uint64_t fence;              /* the last fence handed out */
	int64_t expires_ms;
	uint8_t waiter[16];          /* the queued waiter, all zero: none */
	int64_t waiter_seen_ms;      /* when it last asked */
};

/*
 * Decides one acquire attempt on *st at now_ms on its clock: 0 and *out
 * when taken (st updated), TSEC_EBUSY when not (st may have queued the
 * waiter).  *dirty says whether st changed and must be written back.
 */
int tsec__lease_try(struct tsec__lease_state *st, const uint8_t *waiter,
		    uint64_t ttl_ms, int64_t now_ms, struct tsec__lease *out,
		    bool *dirty);
/* A wait that ended unserved: waiter leaves the queue slot if it holds
 * it.  Whether st changed (and must be written back). */
bool tsec__lease_unwait(struct tsec__lease_state *st, const uint8_t waiter[16]);

/* 0 when token holds a live lease in st; TSEC_ENOENT when nobody holds
 * it, else TSEC_ENOTOWNER (another token, or the lease ended). */
int tsec__lease_owned(const struct tsec__lease_state *st, const uint8_t token[16],
		      int64_t now_ms, const char *name, struct tsec_error *err);

/* The same for a fenced write: token, fence and a live lease. */
int tsec__lease_fenced(const struct tsec__lease_state *st, const struct tsec__fence *f,
		       int64_t now_ms, struct tsec_error *err);

/* Marks st released (the fence is kept for the next holder). */
void tsec__lease_release(struct tsec__lease_state *st);

/* now + ms, saturating. */
int64_t tsec__deadline_after(int64_t now, uint64_t ms);

/*
 * Milliseconds from then to now; INT64_MAX (long ago) when then is
 * negative or in the future, as a time read from a planted or torn lock
 * file may be: never an overflow.
 */
static inline int64_t tsec__ms_since(int64_t now, int64_t then)
{
	return then < 0 || then > now ? INT64_MAX : now - then;
}

#endif
