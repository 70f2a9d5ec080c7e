/*
 * tsec-broker: callers that go away or cancel (issue 48).  A lock belongs
 * to its caller, not to the broker it came through, and a caller that
 * has gone holds nothing: its connection closed (its process ended, ^C,
 * kill -9) or its client library cancelled the call (an interrupt, a Go
 * context ended, a deadline it gave up at).
 *
 * Connections.  A monitor of each router tells the loop, by file
 * descriptor, when a connection is accepted and when it closes.  Each fd
 * has a serial, moved on at each accept, and a closed flag.  A
 * lock.acquire records the serial of the fd its message came on
 * (ZMQ_SRCFD), read after every event up to that message (an accept is
 * reported before the connection's first message); the call's caller has
 * gone when that fd is closed or holds a later connection.
 *
 * What ends where:
 *   - a queued acquire whose caller has gone is not run;
 *   - a parked wait is dropped at its next look (its backoff, at most
 *     50 ms) and leaves the lock's queue (a job of the loop's own);
 *   - a grant whose caller has gone or cancelled the call is not sent,
 *     or cannot be (the routers are ZMQ_ROUTER_MANDATORY): the lock is
 *     let go at once (another job of the loop's own).
 * A cancel, {"method": "cancel", "params": {"id": ID}}, names a call of
 * the caller's own on the same connection: queued, parked or running, it
 * ends "cancelled"; answered with a lock already (the cancel crossed the
 * grant), the lock is let go.  The cancel is answered with which it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "broker/daemon/frames.h"
#include "broker/daemon/loop.h"
#include "common/error.h"
#include "common/wire_fast.h"

#define FD_MAX (1 << 22)         /* beyond any RLIMIT_NOFILE a broker runs with */

int tsec__loop_watch(struct tsec__loop *l, int r)
{
	char ep[48];
	int zero = 0;

	snprintf(ep, sizeof(ep), "inproc://tsec-connections-%d", r);
	if (zmq_socket_monitor(l->routers[r], ep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) ||
	    !(l->mon[r] = zmq_socket(l->d->zmq, ZMQ_PAIR)))
		return -1;
	zmq_setsockopt(l->mon[r], ZMQ_LINGER, &zero, sizeof(zero));
	/* No high-water mark on our side: an event dropped for a full queue
	 * would leave a wait running for a caller that has gone. */
	zmq_setsockopt(l->mon[r], ZMQ_RCVHWM, &zero, sizeof(zero));
	return zmq_connect(l->mon[r], ep);
}

void tsec__loop_unwatch(struct tsec__loop *l)
{
	for (int r = 0; r < 2; r++) {
		if (l->routers[r] && l->mon[r])
			zmq_socket_monitor(l->routers[r], NULL, 0);
		if (l->mon[r])
			zmq_close(l->mon[r]);
		l->mon[r] = NULL;
	}
}

/* An fd's state: bit 0 closed, the rest its serial. */
static uint32_t state_of(const struct tsec__loop *l, int fd)
{
	return fd >= 0 && (size_t)fd < l->nfd ? l->fd_gen[fd] : 0;
}

/* A connection on fd was accepted (a new serial, open) or closed. */
static void event_on(struct tsec__loop *l, int fd, bool accepted)
{
	if (fd < 0 || fd >= FD_MAX)
		return;
	if ((size_t)fd >= l->nfd) {
		size_t n = l->nfd ? l->nfd : 64;
		uint32_t *g;

		while (n <= (size_t)fd)
			n *= 2;
		if (!(g = realloc(l->fd_gen, n * sizeof(*g))))
			return;
		memset(g + l->nfd, 0, (n - l->nfd) * sizeof(*g));
		l->fd_gen = g;
		l->nfd = n;
	}
	l->fd_gen[fd] = accepted ? (l->fd_gen[fd] | 1u) + 1u : l->fd_gen[fd] | 1u;
}

void tsec__loop_events(struct tsec__loop *l)
{
	for (int r = 0; r < 2; r++) {
		while (l->mon[r]) {
			zmq_msg_t ev, addr;
			uint16_t e;
			uint32_t v;

			zmq_msg_init(&ev);
			if (zmq_msg_recv(&ev, l->mon[r], ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&ev);
				break;
			}
			if (zmq_msg_size(&ev) >= 6) {
				memcpy(&e, zmq_msg_data(&ev), 2);
				memcpy(&v, (char *)zmq_msg_data(&ev) + 2, 4);
				if (e & (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED))
					event_on(l, (int)v, e & ZMQ_EVENT_ACCEPTED);
			}
			/* The event's second frame, its endpoint. */
			if (zmq_msg_more(&ev)) {
				zmq_msg_init(&addr);
				zmq_msg_recv(&addr, l->mon[r], 0);
				zmq_msg_close(&addr);
			}
			zmq_msg_close(&ev);
		}
	}
}

bool tsec__loop_gone(const struct tsec__loop *l, const struct tsec__job *j)
{
	uint32_t s = state_of(l, j->fd);

	return j->fd >= 0 && ((s & 1u) || s != j->fd_gen);
}

/* A connection's routing id, hashed with its router (FNV-1a): what a
 * grant recorded in the held table is found by. */
static uint64_t conn_hash(int r, const zmq_msg_t *ident)
{
	const unsigned char *p = zmq_msg_data((zmq_msg_t *)ident);
	uint64_t h = 14695981039346656037ull ^ (uint64_t)r;

	for (size_t i = 0; i < zmq_msg_size((zmq_msg_t *)ident); i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* The message in payload, read (new), or NULL. */
static json_t *message_of(const zmq_msg_t *payload)
{
	const char *p = zmq_msg_data((zmq_msg_t *)payload);
	size_t n = zmq_msg_size((zmq_msg_t *)payload);
	json_t *m = tsec__fast_tree(p, n);

	return m ? m : json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
}

/* A call's id as JSON text, the way the workers write it
 * (tsec__call_id): integers and strings only, at most TSEC__CALL_ID_MAX
 * bytes; *n 0 otherwise. */
static void id_text(const json_t *id, char *out, uint8_t *n)
{
	char *t = NULL;

	*n = 0;
	if (json_is_integer(id))
		t = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
	else if (json_is_string(id))
		t = tsec__json_text(id, JSON_COMPACT | JSON_ENCODE_ANY);
	if (t && strlen(t) <= TSEC__CALL_ID_MAX) {
		*n = (uint8_t)strlen(t);
		memcpy(out, t, *n);
	}
	free(t);
}

void tsec__loop_track(struct tsec__loop *l, struct tsec__job *j)
{
	json_t *m;

	/* Every accept up to this message is known before its fd is read. */
	tsec__loop_events(l);
	j->acquire = true;
	j->fd = zmq_msg_get(&j->payload, ZMQ_SRCFD);
	j->fd_gen = state_of(l, j->fd) & ~1u;
	j->h.conn = conn_hash(j->ix, &j->ident);
	if ((m = message_of(&j->payload))) {
		id_text(json_object_get(m, "id"), j->id, &j->idlen);
		json_decref(m);
	}
}

/* Sends ident and the frames f[0..n) to router: 0, or -1 when the
 * caller is not there to take them (its connection gone, or its queue
 * full); f's messages are sent or left to the caller to close. */
static int send_to(void *router, zmq_msg_t *ident, zmq_msg_t *f, int n)
{
	if (zmq_msg_send(ident, router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return -1;
	zmq_send(router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	for (int i = 0; i < n; i++)
		if (zmq_msg_send(&f[i], router, ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
			break;
	return 0;
}

void tsec__loop_refuse(struct tsec__loop *l, struct tsec__job *j, int code, const char *msg)
{
	char *reply;

	if (j->ix > 1 || !l->routers[j->ix] || tsec__loop_gone(l, j))
		return;
	reply = tsec__error_reply_to(zmq_msg_data(&j->payload), zmq_msg_size(&j->payload), code,
				     msg);
	tsec__send_client(l->routers[j->ix], &j->ident, reply ? reply : "",
			  reply ? strlen(reply) : 0);
	free(reply);
}

void tsec__loop_internal(struct tsec__loop *l, int caller, uint8_t kind,
			 const struct tsec_lock *lk, const struct tsec_lock_wait *w)
{
	zmq_msg_t ident, payload;
	struct tsec__job *j;

	zmq_msg_init(&ident);
	zmq_msg_init(&payload);
	if (!(j = tsec__job_new(&ident, &payload, NULL, 0, 0, caller))) {
		tsec__say("out of memory: a lock %s for a caller that went is left to its lease",
			  lk ? "granted" : "wait");
		return;
	}
	j->h.kind = kind;
	if (lk)
		j->h.lk = *lk;
	if (w)
		j->h.w = *w;
	/* Taken whatever the shares: the broker owes it. */
	tsec__jobq_push(&l->q, j, true);
}

void tsec__loop_end_wait(struct tsec__loop *l, struct tsec__job *j, int code, const char *msg)
{
	if (code)
		tsec__loop_refuse(l, j, code, msg);
	if (!code || code == TSEC_ECANCELED)
		atomic_fetch_add(&l->d->st.waits_dropped, 1);
	if (j->h.kind == TSEC__JOB_STEP) {
		/* It had parked: counted, and queued in the lock. */
		atomic_fetch_sub(&l->d->lock_waits, 1);
		tsec__loop_internal(l, j->caller, TSEC__JOB_ABANDON, NULL, &j->h.w);
	}
	tsec__job_free(j);
}

void tsec__loop_answer(struct tsec__loop *l, struct tsec__job *j, uint8_t flags,
		       zmq_msg_t *aux, zmq_msg_t *f, int n)
{
	void *router = j->ix < 2 ? l->routers[j->ix] : NULL;
	bool gone = tsec__loop_gone(l, j), sent = false;

	if (router && !gone && !j->cancelled)
		sent = send_to(router, &j->ident, f, n) == 0;
	else if (router && !gone)
		tsec__loop_refuse(l, j, TSEC_ECANCELED, "cancelled by the caller");
	if (!sent && (flags & TSEC__W_GRANTS)) {
		/* Granted to nobody: let go now, not held for the lease. */
		size_t k = zmq_msg_size(aux) / sizeof(struct tsec_lock);

		for (size_t i = 0; i < k; i++) {
			struct tsec_lock lk;

			memcpy(&lk, (char *)zmq_msg_data(aux) + i * sizeof(lk), sizeof(lk));
			tsec__loop_internal(l, j->caller, TSEC__JOB_RELEASE, &lk, NULL);
		}
	}
	tsec__job_free(j);
}

/* ---- cancel ---- */

struct wanted {
	int r, caller;
	const zmq_msg_t *ident;
	uint8_t idlen;
	char id[TSEC__CALL_ID_MAX];
};

static bool is_wanted(const struct tsec__job *j, const void *arg)
{
	const struct wanted *w = arg;
	size_t n = zmq_msg_size((zmq_msg_t *)w->ident);

	return j->acquire && j->ix == w->r && j->caller == w->caller && j->idlen == w->idlen &&
	       w->idlen && !memcmp(j->id, w->id, w->idlen) &&
	       zmq_msg_size((zmq_msg_t *)&j->ident) == n &&
	       !memcmp(zmq_msg_data((zmq_msg_t *)&j->ident), zmq_msg_data((zmq_msg_t *)w->ident), n);
}

/* Ends the wanted call wherever it is; which it was. */
static const char *cancel_one(struct tsec__loop *l, const struct wanted *w)
{
	struct tsec__grant_of of = { 0 };
	struct tsec__job *j;
	struct tsec_lock lk;
	const char *found = "none";

	for (int i = 0; i < l->nworkers; i++)
		if (l->running[i] && is_wanted(l->running[i], w) && !l->running[i]->cancelled) {
			/* Its answer says "cancelled"; a grant in it is let go. */
			l->running[i]->cancelled = true;
			return "running";
		}
	for (size_t i = 0; i < l->npark; i++)
		if (is_wanted(l->park[i], w)) {
			j = l->park[i];
			tsec__loop_park_drop(l, i);
			tsec__loop_end_wait(l, j, TSEC_ECANCELED, "cancelled by the caller");
			return "waiting";
		}
	if ((j = tsec__jobq_take(&l->q, w->caller, is_wanted, w))) {
		if (j->h.kind == TSEC__JOB_STEP) {
			tsec__loop_end_wait(l, j, TSEC_ECANCELED, "cancelled by the caller");
		} else {
			tsec__loop_refuse(l, j, TSEC_ECANCELED, "cancelled by the caller");
			atomic_fetch_add(&l->d->st.waits_dropped, 1);
			tsec__job_free(j);
		}
		return "queued";
	}
	/* Answered already, with a lock (a batch's: every one). */
	of.conn = conn_hash(w->r, w->ident);
	of.idlen = w->idlen;
	memcpy(of.id, w->id, w->idlen);
	while (w->idlen && tsec__held_take(&l->d->held, w->caller, &of, &lk)) {
		tsec__loop_internal(l, w->caller, TSEC__JOB_RELEASE, &lk, NULL);
		found = "granted";
	}
	return found;
}

bool tsec__loop_cancel(struct tsec__loop *l, int r, zmq_msg_t *ident, zmq_msg_t *payload,
		       int caller)
{
	const struct tsec__method *m = tsec__method_of(zmq_msg_data(payload), zmq_msg_size(payload));
	struct wanted w = { .r = r, .caller = caller, .ident = ident };
	json_t *msg, *params;
	char *reply = NULL, self[TSEC__CALL_ID_MAX];
	uint8_t selfn;
	const char *found;

	if (!m || m->fn != tsec__m_cancel)
		return false;
	atomic_fetch_add(&l->d->st.calls, 1);
	atomic_fetch_add(&l->d->st.cancels, 1);
	atomic_fetch_add(&l->d->st.by_method[m - tsec__methods], 1);
	msg = message_of(payload);
	params = json_object_get(msg, "params");
	id_text(json_object_get(params, "id"), w.id, &w.idlen);
	id_text(json_object_get(msg, "id"), self, &selfn);
	if (caller < 0 || caller >= l->d->cfg.ncallers) {
		reply = tsec__error_reply_to(zmq_msg_data(payload), zmq_msg_size(payload),
					     TSEC_EDENIED, "unauthenticated caller");
	} else if (!json_is_object(params) || !w.idlen) {
		atomic_fetch_add(&l->d->st.malformed, 1);
		reply = tsec__error_reply_to(zmq_msg_data(payload), zmq_msg_size(payload),
					     TSEC_EPROTO, "cancel needs \"params\": {\"id\": ID}, "
					     "the id (an integer or a short string) of a call of "
					     "this connection");
	} else {
		found = cancel_one(l, &w);
		if (asprintf(&reply, "{\"id\":%.*s,\"result\":{\"cancelled\":\"%s\"}}",
			     selfn ? (int)selfn : 4, selfn ? self : "null", found) < 0)
			reply = NULL;
		tsec__loop_schedule(l);
	}
	tsec__send_client(l->routers[r], ident, reply ? reply : "", reply ? strlen(reply) : 0);
	free(reply);
	json_decref(msg);
	return true;
}
