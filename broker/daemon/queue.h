/*
 * Internal: the calls tsec-broker's loop holds for its workers (queue.c).
 * Each caller has a queue of its own and the callers are served in turn,
 * one call each, so a caller that sends many slow calls delays its own,
 * not everyone's.  Loop thread only: no lock.
 */
#ifndef TSEC_DAEMON_QUEUE_H
#define TSEC_DAEMON_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "tinysecurity/store.h"

/* What a job asks of a worker (struct tsec__job_head.kind). */
enum tsec__job_kind {
	TSEC__JOB_CALL,              /* a caller's call */
	TSEC__JOB_STEP,              /* a parked lock wait's next attempt */
	TSEC__JOB_RELEASE,           /* let go a lock granted to a caller that went */
	TSEC__JOB_ABANDON,           /* a dropped wait leaves the lock's queue */
};

/*
 * The frame the loop sends a worker before a call's payload: whose call
 * it is, what to do, and when the call reached the broker (its budget
 * counts from then, not from when a worker was free, issue 48).
 */
struct tsec__job_head {
	int caller;                  /* its place in cfg.callers, or -1 */
	uint8_t kind;                /* enum tsec__job_kind */
	int64_t arrived_ns;          /* monotonic: when the loop read the call */
	uint64_t conn;               /* its connection, hashed (late cancels) */
	struct tsec_lock_wait w;     /* STEP, ABANDON */
	struct tsec_lock lk;         /* RELEASE */
};

/* The bytes of a header of kind k that are sent (the rest is zeros): a
 * caller's call needs neither the wait nor the lock. */
static inline size_t tsec__job_head_len(uint8_t k)
{
	return k == TSEC__JOB_CALL ? offsetof(struct tsec__job_head, w)
	       : k == TSEC__JOB_RELEASE ? sizeof(struct tsec__job_head)
	       : offsetof(struct tsec__job_head, lk);
}

#define TSEC__CALL_ID_MAX 40         /* a call id kept for cancels, as JSON text */

/*
 * One call for a worker: the client's frames, the header for the worker,
 * and for a lock wait that found the lock held, when to try again.  A
 * lock.acquire also keeps what a cancel or its caller's going away needs:
 * its call id and the connection it came on (fd and that fd's
 * generation, tsec__conn_gone).
 */
struct tsec__job {
	zmq_msg_t ident, payload;
	zmq_msg_t data[3];           /* its binary frames (TSEC_D_MAX_FRAMES) */
	unsigned ndata;
	unsigned char ix;            /* its router */
	int caller;                  /* its place in cfg.callers, or -1 */
	struct tsec__job_head h;
	int64_t wake_ms;             /* a parked wait's next attempt, monotonic */
	bool acquire;                /* a lock.acquire: tracked for cancels */
	bool cancelled;              /* a cancel came while a worker ran it */
	int fd;                      /* its connection's fd, -1 unknown */
	uint32_t fd_gen;
	uint8_t idlen;
	char id[TSEC__CALL_ID_MAX];
	struct tsec__job *next;
};

struct tsec__jobq {
	struct tsec__fifo *fifo;     /* one per caller, and one for -1 */
	unsigned *ring;              /* the callers with calls, in turn */
	unsigned nslots, head, nready;
	size_t len, max, per_caller;
};

/* For ncallers callers: at most max calls in all, per_caller each. */
int tsec__jobq_init(struct tsec__jobq *q, int ncallers, size_t max, size_t per_caller);
/* Frees the queue and every call still in it (their frames closed). */
void tsec__jobq_free(struct tsec__jobq *q);
/* A new job with its frames moved in from the caller's (left empty):
 * identity, payload and ndata binary frames (data may be NULL for 0). */
struct tsec__job *tsec__job_new(zmq_msg_t *ident, zmq_msg_t *payload, zmq_msg_t *data,
				unsigned ndata, unsigned char ix, int caller);
void tsec__job_free(struct tsec__job *j);
/*
 * Appends j to its caller's queue: 0, or -1 when that caller or the
 * queue has its share already (j stays the caller's).  `always`: taken
 * whatever the shares (a lock wait the broker accepted earlier).
 */
int tsec__jobq_push(struct tsec__jobq *q, struct tsec__job *j, bool always);
/* The next caller's oldest call (then that caller goes last), or NULL. */
struct tsec__job *tsec__jobq_pop(struct tsec__jobq *q);
/* Takes out the first of caller's queued calls for which match(j, arg)
 * holds, or NULL: a cancelled call leaves the queue. */
struct tsec__job *tsec__jobq_take(struct tsec__jobq *q, int caller,
				  bool (*match)(const struct tsec__job *j, const void *arg),
				  const void *arg);

#endif
