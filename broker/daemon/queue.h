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

/* One call for a worker: the client's frames, and for a lock wait that
 * found the lock held, the wait and when to try again. */
struct tsec__job {
	zmq_msg_t ident, payload;
	zmq_msg_t data[3];           /* its binary frames (TSEC_D_MAX_FRAMES) */
	unsigned ndata;
	unsigned char ix;            /* its router */
	int caller;                  /* its place in cfg.callers, or -1 */
	bool has_wait;
	struct tsec_lock_wait w;
	int64_t wake_ms;             /* a parked wait's next attempt, monotonic */
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

#endif
