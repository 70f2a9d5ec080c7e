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
