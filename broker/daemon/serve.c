/*
 * tsec-broker: sockets, workers and the event loop.
 *
 * The main thread owns the client sockets (one ROUTER for CURVE endpoints,
 * one for ipc endpoints authenticated by the peer's uid), runs inline
 * methods itself and hands the rest to a pool of workers over inproc
 * sockets, with the caller's identity as ZAP gave it (never anything from
 * the payload); it routes the workers' replies back (worker.c).  It
 * watches each connection (callers.c), so that a lock wait whose caller
 * has gone, or cancelled it, is dropped and a lock granted to such a
 * caller let go.  Signals reach the loop through a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "broker/daemon/daemon.h"
#include "broker/daemon/frames.h"
#include "broker/daemon/loop.h"
#include "common/clock.h"
#include "tinysecurity/client.h"
#include "common/error.h"
#include "common/jsonw.h"
#include "broker/daemon/queue.h"

/* The process's daemon, for the signal handler only. */
static struct tsec__daemon *signalled;

/* Set with each byte written to sigpipe: the loop looks at it between
 * messages without a system call, and reads the pipe when it is set.
 * The handler may run in any thread; a lock-free atomic is safe there. */
static atomic_int signal_pending;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler needs a lock-free int");

static void on_signal(int sig)
{
	char c = sig == SIGHUP ? 'H' : 'T';
	ssize_t r = write(signalled->sigpipe[1], &c, 1);
	(void)r;
	atomic_store_explicit(&signal_pending, 1, memory_order_relaxed);
}

static int signals_start(struct tsec__daemon *d)
{
	struct sigaction sa;

	if (pipe2(d->sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	signalled = d;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

void tsec__block_signals(void)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGHUP);
	sigaddset(&s, SIGTERM);
	sigaddset(&s, SIGINT);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
}

/* The caller index a "User-Id" property carries, or -1. */
static int caller_of(const char *user, size_t n)
{
	int v = 0;

	/* The index our ZAP handler wrote: digits only, read without strtol. */
	if (!user || n == 0 || n > 9)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (user[i] < '0' || user[i] > '9')
			return -1;
		v = v * 10 + (user[i] - '0');
	}
	return v;
}

/* ---- client sockets ---- */

static void *make_router(struct tsec__daemon *d, int curve)
{
	void *s = zmq_socket(d->zmq, ZMQ_ROUTER);
	int one = 1, zero = 0, hwm = 2 * TSEC_D_MAX_QUEUED;
	int64_t max = (int64_t)d->cfg.max_message * 2 + 4096;

	/* Whatever the client library sends is read and answered (too_big
	 * past max_message), never cut off: a cut-off caller waited out
	 * its timeout for "unreachable" (issue 50). */
	if (max < (int64_t)TSEC_CLIENT_MESSAGE_MAX + 4096)
		max = (int64_t)TSEC_CLIENT_MESSAGE_MAX + 4096;

	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	/* Past this a peer is cut off; past max_message it gets an error
	 * reply. */
	zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max));
	/* Room, per client, for the answers of every call the workers may
	 * hold (TSEC_D_MAX_QUEUED) and as many again: a ROUTER drops what
	 * finds its queue full, and an answer the broker took a call for
	 * must reach a client that reads, even while ZeroMQ's I/O thread
	 * lags behind the loop. */
	zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	/* A send to a caller whose connection is gone fails rather than
	 * vanishing: a lock granted to it is let go (callers.c). */
	zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
	if (curve) {
		zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof(one));
		zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, d->cfg.server_secret, 40);
		zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, TSEC_D_TCP_DOMAIN, strlen(TSEC_D_TCP_DOMAIN));
	} else {
		zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, TSEC_D_IPC_DOMAIN, strlen(TSEC_D_IPC_DOMAIN));
	}
	return s;
}

/* A caller's place in parked_of (callers a reload added share the last). */
static int park_slot(const struct tsec__loop *l, int caller)
{
	return caller >= 0 && caller < l->nslots - 1 ? caller : l->nslots - 1;
}

/* The calls the workers hold now. */
static int working(const struct tsec__loop *l)
{
	return l->nworkers - l->nidle;
}

/* Answers a message the loop holds (no job made) with an error. */
static void refuse_msg(struct tsec__loop *l, int r, zmq_msg_t *ident, zmq_msg_t *payload,
		       int code, const char *msg)
{
	char *reply = tsec__error_reply_to(zmq_msg_data(payload), zmq_msg_size(payload), code, msg);

	if (r >= 0 && r < 2 && l->routers[r])
		tsec__send_client(l->routers[r], ident, reply ? reply : "", reply ? strlen(reply) : 0);
	free(reply);
}

/*
 * Hands queued calls to the free workers, the callers in turn.  A lock
 * wait whose caller has gone is not run for it.  The worker gets the
 * call's header, its payload and its frames; the loop keeps the job (a
 * lock.acquire's payload with it, to park it again) until the worker
 * answers.
 */
void tsec__loop_schedule(struct tsec__loop *l)
{
	struct tsec__job *j;

	while (l->nidle > 0 && (j = tsec__jobq_pop(&l->q))) {
		int w;
		zmq_msg_t pay;

		if (j->acquire && tsec__loop_gone(l, j)) {
			tsec__loop_end_wait(l, j, 0, NULL);
			continue;
		}
		w = l->idle[--l->nidle];
		zmq_send(l->work[w], &j->h, tsec__job_head_len(j->h.kind), ZMQ_SNDMORE);
		/* A lock.acquire's payload stays with the job: a copy of its
		 * bytes goes (not of the message, whose buffer the worker wipes
		 * when done). */
		if (j->acquire && !zmq_msg_init_size(&pay, zmq_msg_size(&j->payload)))
			memcpy(zmq_msg_data(&pay), zmq_msg_data(&j->payload), zmq_msg_size(&pay));
		else if (!j->acquire && !zmq_msg_init(&pay))
			zmq_msg_move(&pay, &j->payload);
		else
			zmq_msg_init(&pay);
		zmq_msg_send(&pay, l->work[w], j->ndata ? ZMQ_SNDMORE : 0);
		zmq_msg_close(&pay);
		for (unsigned i = 0; i < j->ndata; i++)
			zmq_msg_send(&j->data[i], l->work[w], i + 1 < j->ndata ? ZMQ_SNDMORE : 0);
		j->ndata = 0;
		l->running[w] = j;
	}
	/* Every push is followed by a schedule: the gauge is right here. */
	atomic_store_explicit(&l->d->calls_queued, (long)l->q.len, memory_order_relaxed);
}

/* A call for a worker: queued behind the caller's own calls. */
static void to_worker(struct tsec__loop *l, int r, int caller, zmq_msg_t *ident,
		      zmq_msg_t *payload, zmq_msg_t *data, unsigned ndata)
{
	const struct tsec__method *m = ndata ? NULL : tsec__method_of(zmq_msg_data(payload),
								       zmq_msg_size(payload));
	struct tsec__job *j = tsec__job_new(ident, payload, data, ndata, (unsigned char)r, caller);

	if (j) {
		j->h.kind = TSEC__JOB_CALL;
		j->h.arrived_ns = (int64_t)tsec__mono_ns();
		if (m && m->fn == tsec__m_lock_acquire)
			tsec__loop_track(l, j);
	}
	if (!j || tsec__jobq_push(&l->q, j, false)) {
		/* Refused now rather than the loop holding more than it may. */
		refuse_msg(l, r, j ? &j->ident : ident, j ? &j->payload : payload, TSEC_EBUSY,
			   "the broker holds as many calls for its workers as it allows (for "
			   "this caller or in all): try again");
		atomic_fetch_add(&l->d->st.errors, 1);
		tsec__job_free(j);
	}
	tsec__loop_schedule(l);
}

/* Reads one client message and runs it, inline or on a worker.  0 when
 * nothing was waiting. */
static int from_client(struct tsec__loop *l, int r)
{
	void *router = l->routers[r];
	zmq_msg_t ident, payload, data[TSEC_D_MAX_FRAMES];
	struct tsec__frames out;
	unsigned ndata;
	size_t size;
	char *hit;
	int bad;

	if (tsec__recv_client(router, &ident, &payload, data, &ndata, &bad) < 0) {
		zmq_msg_close(&ident);
		zmq_msg_close(&payload);
		return 0;
	}
	size = zmq_msg_size(&payload);
	for (unsigned i = 0; i < ndata; i++)
		size += zmq_msg_size(&data[i]);
	if (bad || l->draining || size > l->d->cfg.max_message) {
		char *reply;
		if (l->draining) {
			reply = tsec__error_reply(TSEC_EBUSY, "shutting down");
		} else if (bad) {
			atomic_fetch_add(&l->d->st.malformed, 1);
			reply = tsec__error_reply(TSEC_EPROTO,
						  "expected an empty delimiter frame, one JSON frame "
						  "and at most 3 binary frames");
		} else {
			atomic_fetch_add(&l->d->st.oversized, 1);
			reply = tsec__error_reply(TSEC_ETOOBIG,
						  "message larger than the configured max_message");
		}
		tsec__send_client(router, &ident, reply ? reply : "", reply ? strlen(reply) : 0);
		free(reply);
	} else {
		const char *user = zmq_msg_gets(&payload, "User-Id");
		size_t ulen = user ? strlen(user) : 0;
		int caller = caller_of(user, ulen);

		/* A call with binary frames is a worker's: only values travel
		 * so, and values are storage calls. */
		if (!ndata && tsec__dispatch_fast(l->d, caller, zmq_msg_data(&payload),
						  zmq_msg_size(&payload), &l->reply)) {
			/* Copied by ZeroMQ (one allocation, as giving it away
			 * would take); the buffer stays for the next. */
			tsec__send_client(router, &ident, l->reply.len ? l->reply.buf : "", l->reply.len);
		} else if (!ndata && tsec__loop_cancel(l, r, &ident, &payload, caller)) {
			/* A cancel: the loop's own, answered. */
		} else if (!ndata &&
			   tsec__is_inline(zmq_msg_data(&payload), zmq_msg_size(&payload))) {
			char *reply = tsec__dispatch(l->d, caller,
						     zmq_msg_data(&payload),
						     zmq_msg_size(&payload));
			tsec__send_client_owned(router, &ident, reply, NULL);
		} else if (!ndata && l->d->cfg.st.cache_bytes &&
			   tsec__is_cache_read(zmq_msg_data(&payload), zmq_msg_size(&payload)) &&
			   (hit = tsec__dispatch_hit(l->d, caller, zmq_msg_data(&payload),
						     zmq_msg_size(&payload), &out))) {
			/* A LocalCache hit, answered here: no worker. */
			tsec__send_client_owned(router, &ident, hit, &out);
		} else {
			to_worker(l, r, caller, &ident, &payload, data, ndata);
		}
	}
	zmq_msg_close(&payload);
	zmq_msg_close(&ident);
	for (unsigned i = 0; i < ndata; i++)
		tsec__msg_close_wiped(&data[i]);   /* moved into a job, or not wanted */
	return 1;
}

void tsec__loop_park_drop(struct tsec__loop *l, size_t i)
{
	l->parked_of[park_slot(l, l->park[i]->caller)]--;
	l->park[i] = l->park[--l->npark];
}

/*
 * Keeps a lock wait a worker gave back (the lock was held; aux its wait)
 * until its next attempt.  Bounded: TSEC_D_MAX_PARKED in all, and per
 * caller as many as it may hold locks; past that, or while stopping, the
 * call is answered busy instead (it holds nothing, so nothing is lost).
 * A wait whose caller has gone or cancelled it ends here.
 */
static void park(struct tsec__loop *l, struct tsec__job *j, zmq_msg_t *aux)
{
	size_t mine = l->parked_of[park_slot(l, j->caller)];

	j->h.kind = TSEC__JOB_STEP;    /* counted in lock_waits from here */
	if (zmq_msg_size(aux) != sizeof(j->h.w)) {
		tsec__loop_end_wait(l, j, TSEC_EPROTO, "a lock wait came back malformed");
		return;
	}
	memcpy(&j->h.w, zmq_msg_data(aux), sizeof(j->h.w));
	if (j->cancelled) {
		tsec__loop_end_wait(l, j, TSEC_ECANCELED, "cancelled by the caller");
	} else if (tsec__loop_gone(l, j)) {
		tsec__loop_end_wait(l, j, 0, NULL);
	} else if (l->draining) {
		tsec__loop_end_wait(l, j, TSEC_EBUSY, "shutting down");
	} else if (l->npark >= TSEC_D_MAX_PARKED ||
		   mine >= (size_t)l->d->cfg.max_locks_per_caller) {
		tsec__loop_end_wait(l, j, TSEC_EBUSY, "the lock is held, and this broker holds as "
				    "many waits for locks as it may (for this caller or in all): "
				    "try again later");
	} else {
		j->wake_ms = tsec__mono_ms() + j->h.w.pause_ms;
		if (j->wake_ms < l->park_due)
			l->park_due = j->wake_ms;
		l->parked_of[park_slot(l, j->caller)]++;
		l->park[l->npark++] = j;
	}
}

/* Queues each parked wait that is due for its next attempt (ahead of
 * the shares: the broker took it already); returns the milliseconds
 * until the next one is due (-1: none). */
static int unpark(struct tsec__loop *l)
{
	int64_t now = tsec__mono_ms(), next = -1;

	/* None due yet: no look at each (this runs at every turn of the
	 * loop, and up to TSEC_D_MAX_PARKED waits may be parked). */
	if (now < l->park_due)
		return l->park_due - now > INT32_MAX ? INT32_MAX : (int)(l->park_due - now);
	for (size_t i = 0; i < l->npark;) {
		struct tsec__job *j = l->park[i];

		if (j->wake_ms > now) {
			if (next < 0 || j->wake_ms - now < next)
				next = j->wake_ms - now;
			i++;
			continue;
		}
		tsec__loop_park_drop(l, i); /* the last one moves to i */
		tsec__jobq_push(&l->q, j, true);
	}
	l->park_due = next < 0 ? INT64_MAX : now + next;
	tsec__loop_schedule(l);
	return next < 0 ? -1 : next > INT32_MAX ? INT32_MAX : (int)next;
}

/* Stopping: every parked wait is answered at once, and leaves its
 * lock's queue. */
static void unpark_all_busy(struct tsec__loop *l)
{
	while (l->npark) {
		struct tsec__job *j = l->park[l->npark - 1];

		tsec__loop_park_drop(l, l->npark - 1);
		tsec__loop_end_wait(l, j, TSEC_EBUSY, "shutting down");
	}
	tsec__loop_schedule(l);
}

/* One worker's message, f[0..n): what it says, and the rest. */
static void from_worker(struct tsec__loop *l, zmq_msg_t *f, int n)
{
	struct tsec__worker_says says;
	struct tsec__job *j;

	if (n < 3 || zmq_msg_size(&f[0]) != sizeof(says))
		return;
	memcpy(&says, zmq_msg_data(&f[0]), sizeof(says));
	if (says.worker >= l->nworkers || !(j = l->running[says.worker]))
		return;
	l->running[says.worker] = NULL;
	l->idle[l->nidle++] = says.worker;   /* that worker is free again */
	if (says.flags & TSEC__W_INTERNAL)
		tsec__job_free(j);
	else if (says.flags & TSEC__W_PARKED)
		park(l, j, &f[1]);
	else
		tsec__loop_answer(l, j, says.flags, &f[1], &f[2], n - 2);
}

/* The workers' messages: answers to send on, lock waits to park. */
static void from_workers(struct tsec__loop *l)
{
	for (;;) {
		enum { MAXF = 3 + TSEC_D_MAX_FRAMES };
		zmq_msg_t f[MAXF];
		int n = 0, more = 1;
		size_t msz = sizeof(more);

		zmq_msg_init(&f[0]);
		if (zmq_msg_recv(&f[0], l->replies, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&f[0]);
			break;
		}
		n = 1;
		zmq_getsockopt(l->replies, ZMQ_RCVMORE, &more, &msz);
		while (more && n < MAXF) {
			zmq_msg_init(&f[n]);
			if (zmq_msg_recv(&f[n], l->replies, 0) < 0) {
				zmq_msg_close(&f[n]);
				break;
			}
			n++;
			zmq_getsockopt(l->replies, ZMQ_RCVMORE, &more, &msz);
		}
		while (more) {
			/* More than a worker sends: the rest dropped. */
			zmq_msg_t x;

			zmq_msg_init(&x);
			if (zmq_msg_recv(&x, l->replies, 0) < 0)
				more = 0;
			else
				zmq_getsockopt(l->replies, ZMQ_RCVMORE, &more, &msz);
			tsec__msg_close_wiped(&x);
		}
		from_worker(l, f, n);
		for (int i = 0; i < n; i++)
			tsec__msg_close_wiped(&f[i]);
	}
	tsec__loop_schedule(l);
}

static void on_signals(struct tsec__loop *l)
{
	struct tsec_error err;
	char c;

	while (read(l->d->sigpipe[0], &c, 1) == 1) {
		if (c == 'H') {
			tsec__policy_reload(l->d, &err);
			tsec__declog_reopen(l->d->log);
		} else if (!l->draining) {
			tsec__say("stopping: answering %ld calls in flight",
				  (long)working(l) + (long)l->q.len);
			l->draining = 1;
			l->drain_until = tsec__mono_ms() + TSEC_D_DRAIN_LINGER_MS;
		}
	}
}

static int bind_all(struct tsec__loop *l)
{
	const struct tsec__config *cfg = &l->d->cfg;
	int rc;

	for (int e = 0; e < cfg->nendpoints; e++) {
		const char *ep = cfg->endpoints[e];
		int tcp = !strncmp(ep, "tcp://", 6);
		int curve = tcp || cfg->ipc_curve;
		void **r = &l->routers[curve ? 0 : 1];
		if (!*r && (!(*r = make_router(l->d, curve)) || tsec__loop_watch(l, curve ? 0 : 1))) {
			tsec__say("cannot watch the connections of %s: %s", ep, zmq_strerror(errno));
			return -1;
		}
		if ((rc = tcp ? zmq_bind(*r, ep)
			      : tsec__bind_ipc(*r, ep, l->d->cfg.ipc_gid, &l->claims[l->nclaims]))) {
			/* Why, when the broker refused, is said already: not the
			 * OS's errno (issue 51, item 2: "Permission denied"). */
			tsec__say("cannot bind %s: %s", ep, rc == TSEC__BIND_SAID ? "refused (above)"
				  : zmq_strerror(errno));
			return -1;
		}
		l->nclaims += !tcp;
		tsec__say("listening on %s (%s)", ep, curve ? "CURVE" : "peer uid");
	}
	return 0;
}

/* Whether s has a message waiting.  ZMQ_EVENTS also takes in the
 * commands its ZMQ_FD signalled, so it is read before every sleep. */
static bool waiting(void *s)
{
	int ev = 0;
	size_t sz = sizeof(ev);

	return zmq_getsockopt(s, ZMQ_EVENTS, &ev, &sz) == 0 && (ev & ZMQ_POLLIN);
}

/*
 * The loop: answer what is waiting on each socket (up to 64 messages a
 * socket a round, so none starves the others), and sleep in poll() on
 * the sockets' ZMQ_FDs and the signal pipe only when a look at every
 * socket found nothing.  A ZMQ_FD only says that something may have
 * changed, and says it once: so nothing sleeps before ZMQ_EVENTS was
 * read on every socket since the last message (zmq_poll does the same
 * with two poll() calls a wake-up, one of them for nothing).
 */
static void run_loop(struct tsec__loop *l)
{
	int fd[3] = { -1, -1, -1 }, mfd[2] = { -1, -1 };
	size_t sz;

	for (int r = 0; r < 2; r++)
		if (l->routers[r] && ((sz = sizeof(fd[r]),
				       zmq_getsockopt(l->routers[r], ZMQ_FD, &fd[r], &sz)) ||
				      (sz = sizeof(mfd[r]),
				       zmq_getsockopt(l->mon[r], ZMQ_FD, &mfd[r], &sz))))
			return;
	sz = sizeof(fd[2]);
	if (zmq_getsockopt(l->replies, ZMQ_FD, &fd[2], &sz))
		return;
	for (unsigned turns = 0;; turns++) {
		struct pollfd pf[6];
		bool busy = false;
		int n = 0, tmo;

		if (atomic_exchange_explicit(&signal_pending, 0, memory_order_relaxed))
			on_signals(l);
		/* Connections opened and closed (callers.c): looked at every
		 * 64 turns while busy and when a monitor's fd wakes the loop (a
		 * lock.acquire looks for itself), not at every turn: a Check
		 * through the broker paid 1,171 instructions more for that. */
		if (!(turns % 64))
			tsec__loop_events(l);
		for (int r = 0; r < 2; r++) {
			int k = 0;

			while (l->routers[r] && k < 64 && waiting(l->routers[r]) && from_client(l, r))
				k++;
			busy |= k > 0;
		}
		/* The workers' socket only while they hold calls: a look at a
		 * socket's mailbox is a system call. */
		if (working(l) > 0 && waiting(l->replies)) {
			from_workers(l);
			busy = true;
		}
		if (l->draining && l->npark)
			unpark_all_busy(l);
		tmo = l->npark ? unpark(l) : -1;
		if (l->draining && working(l) == 0 && l->q.len == 0 &&
		    tsec__mono_ms() >= l->drain_until)
			break;
		if (busy)
			continue;
		if (l->draining && (tmo < 0 || tmo > 50))
			tmo = 50;
		for (int r = 0; r < 2; r++)
			if (l->routers[r]) {
				pf[n++] = (struct pollfd){ fd[r], POLLIN, 0 };
				pf[n++] = (struct pollfd){ mfd[r], POLLIN, 0 };
			}
		if (working(l) > 0)
			pf[n++] = (struct pollfd){ fd[2], POLLIN, 0 };
		pf[n++] = (struct pollfd){ l->d->sigpipe[0], POLLIN, 0 };
		if (poll(pf, (nfds_t)n, tmo) < 0 && errno != EINTR)
			break;
		if (pf[n - 1].revents & POLLIN)
			on_signals(l);
		/* A monitor drained to its end signals its fd again at its next
		 * event: drained when it does (and every 64 busy turns). */
		for (int i = 0; i < n; i++)
			if ((pf[i].fd == mfd[0] || pf[i].fd == mfd[1]) && (pf[i].revents & POLLIN))
				tsec__loop_events(l);
	}
}

/* The loop's own sockets and tables: the workers' replies, the queue,
 * the parked waits, a socket to each worker.  0 or -1 (loop_close undoes
 * what was made). */
static int loop_open(struct tsec__daemon *d, struct tsec__loop *l)
{
	int zero = 0;

	l->replies = zmq_socket(d->zmq, ZMQ_PULL);
	zmq_setsockopt(l->replies, ZMQ_LINGER, &zero, sizeof(zero));
	/* No high-water marks, so that a send to a worker never blocks the
	 * loop: it holds the calls itself (TSEC_D_MAX_QUEUED), and gives a
	 * worker one call at a time. */
	zmq_setsockopt(l->replies, ZMQ_RCVHWM, &zero, sizeof(zero));
	l->nslots = (d->cfg.ncallers > 0 ? d->cfg.ncallers : 0) + 1;
	if (zmq_bind(l->replies, TSEC_D_REPLY_ENDPOINT) ||
	    tsec__jobq_init(&l->q, d->cfg.ncallers, TSEC_D_MAX_QUEUED, TSEC_D_QUEUED_PER_CALLER) ||
	    !(l->parked_of = calloc((size_t)l->nslots, sizeof(*l->parked_of))) ||
	    !(l->park = calloc(TSEC_D_MAX_PARKED, sizeof(*l->park))))
		return -1;
	for (; l->nworkers < d->cfg.workers; l->nworkers++) {
		char ep[64];
		void *w = zmq_socket(d->zmq, ZMQ_PUSH);

		snprintf(ep, sizeof(ep), TSEC_D_WORK_ENDPOINT "-%d", l->nworkers);
		if (!w)
			return -1;
		l->work[l->nworkers] = w;
		zmq_setsockopt(w, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_setsockopt(w, ZMQ_SNDHWM, &zero, sizeof(zero));
		if (zmq_bind(w, ep))
			return -1;
		l->idle[l->nidle++] = (unsigned char)l->nworkers;
	}
	return 0;
}

/* Everything loop_open and the loop made, closed and freed (before the
 * context ends: the workers' sockets close with it). */
static void loop_close(struct tsec__loop *l)
{
	tsec__loop_unwatch(l);
	for (int r = 0; r < 2; r++)
		if (l->routers[r])
			zmq_close(l->routers[r]);
	for (int i = 0; i < l->nworkers; i++) {
		zmq_close(l->work[i]);
		tsec__job_free(l->running[i]);
	}
	while (l->npark) {
		struct tsec__job *j = l->park[--l->npark];
		tsec__job_free(j);
	}
	tsec__jobq_free(&l->q);
	free(l->parked_of);
	free(l->park);
	free(l->fd_gen);
	if (l->replies)
		zmq_close(l->replies);
	tsec__jw_free(&l->reply);
}

int tsec__serve(struct tsec__daemon *d)
{
	struct tsec__loop l = { .d = d, .park_due = INT64_MAX };
	pthread_t workers[TSEC_D_MAX_WORKERS], zapt;
	struct tsec__worker_arg wargs[TSEC_D_MAX_WORKERS];
	int nworkers = 0, zap = 0, rc = -1;

	if (signals_start(d))
		return -1;
	d->zmq = zmq_ctx_new();
	if (!d->zmq)
		return -1;
	if (tsec__auth_start(d, &zapt))
		goto stop;
	zap = 1;
	if (loop_open(d, &l))
		goto stop;
	for (; nworkers < l.nworkers; nworkers++) {
		wargs[nworkers] = (struct tsec__worker_arg){ d, nworkers };
		if (pthread_create(&workers[nworkers], NULL, tsec__worker_main, &wargs[nworkers]))
			goto stop;
	}
	if (bind_all(&l))
		goto stop;
	tsec__say("serving policy %s with module %s", d->cfg.policy, d->cfg.module);
	run_loop(&l);
	rc = 0;
stop:
	loop_close(&l);
	zmq_ctx_shutdown(d->zmq);
	for (int i = 0; i < nworkers; i++)
		pthread_join(workers[i], NULL);
	if (zap)
		pthread_join(zapt, NULL);
	while (zmq_ctx_term(d->zmq) < 0 && errno == EINTR)
		;
	d->zmq = NULL;
	/* After the context: its I/O thread removes the socket files, which
	 * are the next broker's once the claims go. */
	for (int i = 0; i < l.nclaims; i++)
		close(l.claims[i]);
	return rc;
}
