/*
 * Internal: tsec-broker's event loop, shared by serve.c (sockets, the
 * loop, handing calls to workers), callers.c (callers that go away or
 * cancel) and worker.c (the workers' side).  Loop thread only, but for
 * the worker protocol's types.
 */
#ifndef TSEC_DAEMON_LOOP_H
#define TSEC_DAEMON_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include <zmq.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/queue.h"
#include "common/jsonw.h"

/*
 * The worker protocol.  To a worker, on its own socket: the job's header
 * (struct tsec__job_head), the payload, the call's binary frames.  Back,
 * on the replies socket: struct tsec__worker_says, an aux frame (a parked
 * wait's state, or the locks the call took), the reply's text and its
 * binary frames.
 */
enum {
	TSEC__W_PARKED = 1,          /* aux: the wait (struct tsec_lock_wait); no reply */
	TSEC__W_GRANTS = 2,          /* aux: the locks the call took (struct tsec_lock[]) */
	TSEC__W_INTERNAL = 4,        /* the loop's own job: no reply to anyone */
};

struct tsec__worker_says {
	uint8_t worker;              /* which worker: free again */
	uint8_t flags;
};

struct tsec__worker_arg {
	struct tsec__daemon *d;
	int index;
};

/* worker.c: a worker thread's body. */
void *tsec__worker_main(void *arg);

struct tsec__loop {
	struct tsec__daemon *d;
	void *routers[2];            /* [0] CURVE, [1] ipc by uid */
	void *mon[2];                /* each router's monitor: connections opened and closed */
	int claims[TSEC_D_MAX_ENDPOINTS]; /* flocked "<socket>.lock" of each ipc endpoint */
	int nclaims;
	void *work[TSEC_D_MAX_WORKERS], *replies;
	int nworkers;
	unsigned char idle[TSEC_D_MAX_WORKERS]; /* the workers free now */
	int nidle;
	/* What each worker runs now (kept for its answer: to park it again,
	 * to let its grants go when its caller has gone). */
	struct tsec__job *running[TSEC_D_MAX_WORKERS];
	struct tsec__jobq q;         /* the calls waiting for one */
	struct tsec__jw reply;       /* a fast Check's reply, its buffer reused */
	int draining;
	int64_t drain_until;
	/* lock.acquire calls waiting for a held lock, until their next
	 * attempt: no worker is held while they wait. */
	struct tsec__job **park;     /* TSEC_D_MAX_PARKED */
	size_t npark;
	size_t *parked_of;           /* per caller (the last: -1 and any new) */
	int nslots;
	int64_t park_due;            /* the earliest wake_ms, INT64_MAX: none */
	/* The connections: each fd's generation, moved on whenever a
	 * connection on it opens or closes (callers.c). */
	uint32_t *fd_gen;
	size_t nfd;
};

/* serve.c */
void tsec__loop_schedule(struct tsec__loop *l);
void tsec__loop_park_drop(struct tsec__loop *l, size_t i);

/* callers.c: watching connections, cancels, calls whose caller went. */
int tsec__loop_watch(struct tsec__loop *l, int r);
void tsec__loop_unwatch(struct tsec__loop *l);
void tsec__loop_events(struct tsec__loop *l);
/* A lock.acquire just read (j, from router j->ix): tracked for cancels
 * and for its caller going away. */
void tsec__loop_track(struct tsec__loop *l, struct tsec__job *j);
/* Whether the connection j came on has closed. */
bool tsec__loop_gone(const struct tsec__loop *l, const struct tsec__job *j);
/* Answers j's caller with an error (nothing when it has gone). */
void tsec__loop_refuse(struct tsec__loop *l, struct tsec__job *j, int code, const char *msg);
/*
 * A lock wait that ends without a worker (its caller gone or cancelling,
 * or the broker stopping): answered with code/msg unless code is 0, and
 * taken out of the lock's queue (a job of its own); j is consumed.
 */
void tsec__loop_end_wait(struct tsec__loop *l, struct tsec__job *j, int code, const char *msg);
/* Queues a job of the loop's own: RELEASE lk, or ABANDON w, as caller. */
void tsec__loop_internal(struct tsec__loop *l, int caller, uint8_t kind,
			 const struct tsec_lock *lk, const struct tsec_lock_wait *w);
/* Whether payload is a "cancel" call; handles it (the loop answers). */
bool tsec__loop_cancel(struct tsec__loop *l, int r, zmq_msg_t *ident, zmq_msg_t *payload,
		       int caller);
/* A worker's answer to j (its says, aux and the rest of its message in
 * f[0..n)): sent on to the caller, or, when the caller has gone or
 * cancelled the call, the locks it took let go.  j is consumed. */
void tsec__loop_answer(struct tsec__loop *l, struct tsec__job *j, uint8_t flags,
		       zmq_msg_t *aux, zmq_msg_t *f, int n);

#endif
