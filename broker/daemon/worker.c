/*
 * tsec-broker: a worker.  It takes one job at a time from the loop on a
 * socket of its own (so the loop hands a job only to a worker that is
 * free), runs it, and says so on the replies socket: a caller's call
 * (answered, or parked again when it is a lock wait that found the lock
 * held, with the locks it took), or one of the loop's own jobs (let go a
 * lock granted to a caller that has gone; take a dropped wait out of its
 * lock's queue).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "broker/daemon/frames.h"
#include "broker/daemon/loop.h"

enum { HEAD, PAYLOAD, DATA, MAXF = DATA + TSEC_D_MAX_FRAMES };

/* Reads one job's frames into f: their count, 0 for one that is not a
 * job (dropped whole), -1 when the context ended. */
static int recv_job(void *in, zmq_msg_t *f)
{
	int n = 0, more = 1;
	size_t msz = sizeof(more);

	while (more) {
		zmq_msg_t x, *m = n < MAXF ? &f[n] : &x;

		zmq_msg_init(m);
		if (zmq_msg_recv(m, in, 0) < 0) {
			zmq_msg_close(m);
			if (errno == EINTR)  /* not ours to stop on: again */
				continue;
			for (int i = 0; i < n && i < MAXF; i++)
				tsec__msg_close_wiped(&f[i]);
			return -1;       /* context terminated */
		}
		zmq_getsockopt(in, ZMQ_RCVMORE, &more, &msz);
		if (m == &x)
			tsec__msg_close_wiped(&x);
		n++;
	}
	if (n > MAXF || n < DATA || zmq_msg_size(&f[HEAD]) < offsetof(struct tsec__job_head, w) ||
	    zmq_msg_size(&f[HEAD]) > sizeof(struct tsec__job_head)) {
		for (int i = 0; i < n && i < MAXF; i++)
			tsec__msg_close_wiped(&f[i]);
		return 0;
	}
	return n;
}

/* Runs a caller's call (or a parked wait's next attempt): the reply, and
 * what goes beside it in *says and aux. */
static char *run_call(struct tsec__daemon *d, const struct tsec__job_head *h, zmq_msg_t *f,
		      int n, struct tsec__run *run, struct tsec_lock_wait *wout,
		      struct tsec__frames *fout, uint8_t *flags, const void **aux, size_t *auxn)
{
	struct tsec__frames fin = { .n = (unsigned)(n - DATA) };
	char *reply;

	for (unsigned i = 0; i < fin.n; i++) {
		fin.ptr[i] = zmq_msg_data(&f[DATA + i]);
		fin.len[i] = zmq_msg_size(&f[DATA + i]);
	}
	memset(run, 0, sizeof(*run));
	run->arrived_ns = h->arrived_ns;
	run->of.conn = h->conn;
	run->wait_in = h->kind == TSEC__JOB_STEP ? &h->w : NULL;
	/* A call with frames never parks (lock calls take none): it waits
	 * here, its frames kept with it. */
	run->wait_out = fin.n ? NULL : wout;
	reply = tsec__dispatch_step(d, h->caller, zmq_msg_data(&f[PAYLOAD]),
				    zmq_msg_size(&f[PAYLOAD]), &fin, run, fout);
	if (run->parked) {
		*flags = TSEC__W_PARKED;
		*aux = wout;
		*auxn = sizeof(*wout);
		free(reply);
		return NULL;
	}
	if (run->grants.n) {
		*flags = TSEC__W_GRANTS;
		*aux = run->grants.lk;
		*auxn = run->grants.n * sizeof(run->grants.lk[0]);
	}
	return reply;
}

void *tsec__worker_main(void *arg)
{
	struct tsec__daemon *d = ((struct tsec__worker_arg *)arg)->d;
	int index = ((struct tsec__worker_arg *)arg)->index;
	void *in = zmq_socket(d->zmq, ZMQ_PULL), *out = zmq_socket(d->zmq, ZMQ_PUSH);
	char ep[64];
	int zero = 0;

	pthread_setname_np(pthread_self(), "tsec-worker");
	tsec__block_signals();
	zmq_setsockopt(in, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(out, ZMQ_LINGER, &zero, sizeof(zero));
	/* No high-water mark: the loop bounds the calls in flight. */
	zmq_setsockopt(in, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(out, ZMQ_SNDHWM, &zero, sizeof(zero));
	snprintf(ep, sizeof(ep), TSEC_D_WORK_ENDPOINT "-%d", index);
	if (zmq_connect(in, ep) || zmq_connect(out, TSEC_D_REPLY_ENDPOINT))
		goto out;
	for (;;) {
		zmq_msg_t f[MAXF];
		struct tsec__job_head h;
		struct tsec__worker_says says = { (uint8_t)index, TSEC__W_INTERNAL };
		struct tsec__frames fout = { 0 };
		struct tsec_lock_wait wout;
		struct tsec__run run;
		const void *aux = NULL;
		size_t auxn = 0;
		char *reply = NULL;
		int n = recv_job(in, f);

		if (n < 0)
			break;
		if (n > 0) {
			memset(&h, 0, sizeof(h));
			memcpy(&h, zmq_msg_data(&f[HEAD]), zmq_msg_size(&f[HEAD]));
			if (h.kind == TSEC__JOB_CALL || h.kind == TSEC__JOB_STEP) {
				says.flags = 0;
				reply = run_call(d, &h, f, n, &run, &wout, &fout, &says.flags, &aux,
						 &auxn);
			} else if (h.kind == TSEC__JOB_RELEASE) {
				tsec__let_go(d, h.caller, &h.lk);
			} else if (h.kind == TSEC__JOB_ABANDON) {
				tsec_lock_wait_abandon(d->store, &h.w);
			}
		}
		/* Always an answer: the loop counts this worker free by it. */
		zmq_send(out, &says, sizeof(says), ZMQ_SNDMORE);
		zmq_send(out, aux, auxn, ZMQ_SNDMORE);
		tsec__send_reply_on(out, reply, &fout, 0);
		/* The call's own frames may hold a key: wiped. */
		for (int i = 0; i < n; i++)
			tsec__msg_close_wiped(&f[i]);
	}
out:
	zmq_close(in);
	zmq_close(out);
	return NULL;
}
