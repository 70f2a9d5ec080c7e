/*
 * The calls waiting for a worker (queue.h): a FIFO per caller and a ring
 * of the callers that have calls, served one call each in turn.
 */
#include <stdlib.h>

#include "broker/daemon/frames.h"
#include "broker/daemon/queue.h"

struct tsec__fifo {
	struct tsec__job *head, *tail;
	size_t n;
};

int tsec__jobq_init(struct tsec__jobq *q, int ncallers, size_t max, size_t per_caller)
{
	q->nslots = (unsigned)(ncallers > 0 ? ncallers : 0) + 1;
	q->fifo = calloc(q->nslots, sizeof(*q->fifo));
	q->ring = calloc(q->nslots, sizeof(*q->ring));
	q->head = q->nready = 0;
	q->len = 0;
	q->max = max;
	q->per_caller = per_caller;
	if (!q->fifo || !q->ring) {
		free(q->fifo);
		free(q->ring);
		q->fifo = NULL;
		q->ring = NULL;
		return -1;
	}
	return 0;
}

struct tsec__job *tsec__job_new(zmq_msg_t *ident, zmq_msg_t *payload, zmq_msg_t *data,
				unsigned ndata, unsigned char ix, int caller)
{
	struct tsec__job *j;

	if (ndata > sizeof(j->data) / sizeof(j->data[0]) || !(j = calloc(1, sizeof(*j))))
		return NULL;
	zmq_msg_init(&j->ident);
	zmq_msg_init(&j->payload);
	zmq_msg_move(&j->ident, ident);
	zmq_msg_move(&j->payload, payload);
	for (unsigned i = 0; i < ndata; i++) {
		zmq_msg_init(&j->data[i]);
		zmq_msg_move(&j->data[i], &data[i]);
	}
	j->ndata = ndata;
	j->ix = ix;
	j->caller = caller;
	j->h.caller = caller;
	j->fd = -1;
	return j;
}

void tsec__job_free(struct tsec__job *j)
{
	if (!j)
		return;
	zmq_msg_close(&j->ident);
	zmq_msg_close(&j->payload);
	for (unsigned i = 0; i < j->ndata; i++)
		tsec__msg_close_wiped(&j->data[i]);   /* not sent: may be a key */
	free(j);
}

/* The caller's slot: its index, the last one for -1 (or out of range). */
static unsigned slot_of(const struct tsec__jobq *q, int caller)
{
	return caller >= 0 && (unsigned)caller < q->nslots - 1 ? (unsigned)caller : q->nslots - 1;
}

int tsec__jobq_push(struct tsec__jobq *q, struct tsec__job *j, bool always)
{
	unsigned s = slot_of(q, j->caller);
	struct tsec__fifo *f = &q->fifo[s];

	if (!always && (q->len >= q->max || f->n >= q->per_caller))
		return -1;
	j->next = NULL;
	if (f->tail)
		f->tail->next = j;
	else
		f->head = j;
	f->tail = j;
	if (f->n++ == 0)
		q->ring[(q->head + q->nready++) % q->nslots] = s;
	q->len++;
	return 0;
}

struct tsec__job *tsec__jobq_pop(struct tsec__jobq *q)
{
	struct tsec__fifo *f;
	struct tsec__job *j;
	unsigned s;

	if (!q->nready)
		return NULL;
	s = q->ring[q->head];
	q->head = (q->head + 1) % q->nslots;
	q->nready--;
	f = &q->fifo[s];
	j = f->head;
	f->head = j->next;
	if (!f->head)
		f->tail = NULL;
	if (--f->n)
		q->ring[(q->head + q->nready++) % q->nslots] = s; /* last, for its next */
	q->len--;
	j->next = NULL;
	return j;
}

/* Unlinks j (prev: the one before it, NULL for the head) from fifo s. */
static void unlink_job(struct tsec__jobq *q, unsigned s, struct tsec__job *prev,
		       struct tsec__job *j)
{
	struct tsec__fifo *f = &q->fifo[s];

	if (prev)
		prev->next = j->next;
	else
		f->head = j->next;
	if (f->tail == j)
		f->tail = prev;
	j->next = NULL;
	q->len--;
	if (--f->n)
		return;
	/* Its caller has nothing queued now: out of the ring. */
	for (unsigned i = 0; i < q->nready; i++) {
		unsigned at = (q->head + i) % q->nslots;

		if (q->ring[at] != s)
			continue;
		for (; i + 1 < q->nready; i++)
			q->ring[(q->head + i) % q->nslots] = q->ring[(q->head + i + 1) % q->nslots];
		q->nready--;
		break;
	}
}

struct tsec__job *tsec__jobq_take(struct tsec__jobq *q, int caller,
				  bool (*match)(const struct tsec__job *j, const void *arg),
				  const void *arg)
{
	unsigned s = slot_of(q, caller);
	struct tsec__job *prev = NULL;

	for (struct tsec__job *j = q->fifo[s].head; j; prev = j, j = j->next)
		if (match(j, arg)) {
			unlink_job(q, s, prev, j);
			return j;
		}
	return NULL;
}

void tsec__jobq_free(struct tsec__jobq *q)
{
	struct tsec__job *j;

	if (q->fifo)
		while ((j = tsec__jobq_pop(q)))
			tsec__job_free(j);
	free(q->fifo);
	free(q->ring);
	q->fifo = NULL;
	q->ring = NULL;
}
