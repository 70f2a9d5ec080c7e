/*
 * The client library: one DEALER socket, JSON requests with ids.  With
 * several brokers it talks to one at a time and fails over per call:
 * no answer within attempt_ms, or no connection at all (ZMQ_IMMEDIATE:
 * nothing is queued for a broker that is not connected; heartbeats end
 * a connection to a broker that died), and it reconnects to the next
 * and sends the same call again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "tinysecurity/client.h"
#include "common/wire.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/jsonw.h"
#include "common/methods.h"
#include "common/opts.h"
#include "common/wire_fast.h"
#include "broker/client/client_private.h"

/*
 * ZeroMQ's calls on a socket first run its pending commands, and a
 * signal can interrupt them (EINTR); a host's signals are not ours to
 * fail on (Go's runtime preempts threads with SIGURG: a client opened
 * in a Go program failed "Interrupted system call", issue 35).  These
 * make the call again.
 */
static int z_setsockopt(void *s, int opt, const void *v, size_t n)
{
	int rc;

	while ((rc = zmq_setsockopt(s, opt, v, n)) < 0 && errno == EINTR)
		;
	return rc;
}

static int z_getsockopt(void *s, int opt, void *v, size_t *n)
{
	int rc;

	while ((rc = zmq_getsockopt(s, opt, v, n)) < 0 && errno == EINTR)
		;
	return rc;
}

static int z_connect(void *s, const char *ep)
{
	int rc;

	while ((rc = zmq_connect(s, ep)) < 0 && errno == EINTR)
		;
	return rc;
}

static int z_monitor(void *s, const char *ep, int events)
{
	int rc;

	while ((rc = zmq_socket_monitor(s, ep, events)) < 0 && errno == EINTR)
		;
	return rc;
}

/* A fresh socket connected to endpoint cur. */
static int connect_cur(struct tsec_client *c, struct tsec_error *err)
{
	const struct tsec_client_endpoint *e = &c->ep[c->cur];
	int zero = 0, one = 1, ivl = 500, tmo = 1500, ttl = 3000;

	char mon[64];

	if (c->mon)
		zmq_close(c->mon);
	c->mon = NULL;
	if (c->sock) {
		z_monitor(c->sock, NULL, 0);
		zmq_close(c->sock);
	}
	c->seen = 0;
	if (!(c->sock = zmq_socket(c->ctx, ZMQ_DEALER)))
		return tsec__seterr(err, TSEC_ENOMEM, "", "cannot create a ZeroMQ socket");
	z_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof(zero));
	/* Watch the connection, to tell "nobody listens", "refused our key"
	 * and "no answer" apart when a call gets no reply. */
	snprintf(mon, sizeof(mon), "inproc://tsec-client-mon-%p", (void *)c);
	if (z_monitor(c->sock, mon, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
		      ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
		      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED) == 0 &&
	    (c->mon = zmq_socket(c->ctx, ZMQ_PAIR))) {
		z_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof(zero));
		if (z_connect(c->mon, mon)) {
			zmq_close(c->mon);
			c->mon = NULL;
		}
	}
	if (c->nep > 1) {
		/* Queue nothing for a broker that is not there, and notice one
		 * that stopped answering. */
		z_setsockopt(c->sock, ZMQ_IMMEDIATE, &one, sizeof(one));
		z_setsockopt(c->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof(ivl));
		z_setsockopt(c->sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof(tmo));
		z_setsockopt(c->sock, ZMQ_HEARTBEAT_TTL, &ttl, sizeof(ttl));
	}
	if (e->server_public_key &&
	    (strlen(e->server_public_key) != 40 ||
	     z_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, e->server_public_key, 40) ||
	     z_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, c->pub, 40) ||
	     z_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, c->sec, 40)))
		return tsec__seterr(err, TSEC_EINVAL, "keys", "keys must be 40 characters of Z85");
	if (z_connect(c->sock, e->endpoint))
		return tsec__seterr(err, TSEC_EINVAL, "endpoint", "%s: %s", e->endpoint,
				    zmq_strerror(errno));
	return 0;
}

int tsec_client_open(struct tsec_client **out,
		     const struct tsec_client_opts *o, struct tsec_error *err)
{
	struct tsec_client_opts mine;
	struct tsec_client_endpoint one;
	const struct tsec_client_endpoint *eps;
	struct tsec_client *c;
	size_t n;
	int rc;

	*out = NULL;
	if (!o)
		return tsec__seterr(err, TSEC_EINVAL, "endpoint", "no endpoint");
	/* The caller's struct by its size: what its header had (types.h). */
	if ((rc = tsec__opts_take(&mine, sizeof(mine), TSEC_CLIENT_OPTS_MIN_SIZE, o,
				  "client options", err)))
		return rc;
	o = &mine;
	if (o->nendpoints) {
		eps = o->endpoints;
		n = o->nendpoints;
		if (!eps || n > ENDPOINTS_MAX)
			return tsec__seterr(err, TSEC_EINVAL, "endpoints", "1 to %d endpoints",
					    ENDPOINTS_MAX);
	} else {
		if (!o->endpoint)
			return tsec__seterr(err, TSEC_EINVAL, "endpoint", "no endpoint");
		one.endpoint = o->endpoint;
		one.server_public_key = o->server_public_key;
		eps = &one;
		n = 1;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	/* What tsec_client_interrupt writes, and every wait polls. */
	if ((c->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		free(c);
		return tsec__seterr(err, TSEC_EIO, "", "eventfd: %s", strerror(errno));
	}
	for (size_t i = 0; i < n; i++) {
		if (!eps[i].endpoint ||
		    (!strncmp(eps[i].endpoint, "tcp://", 6) &&
		     (!eps[i].server_public_key || !o->public_key || !o->secret_key))) {
			tsec_client_close(&c);
			return tsec__seterr(err, TSEC_EINVAL, "keys", eps[i].endpoint
					    ? "tcp needs the server's public key and a client key pair"
					    : "an endpoint is missing");
		}
		c->ep[i].endpoint = c->owned[2 * i] = strdup(eps[i].endpoint);
		if (eps[i].server_public_key)
			c->ep[i].server_public_key = c->owned[2 * i + 1] =
				strdup(eps[i].server_public_key);
		c->curve |= eps[i].server_public_key != NULL;
	}
	c->nep = n;
	if (c->curve && (!o->public_key || !o->secret_key || strlen(o->public_key) != 40 ||
			 strlen(o->secret_key) != 40)) {
		tsec_client_close(&c);
		return tsec__seterr(err, TSEC_EINVAL, "keys", "keys must be 40 characters of Z85");
	}
	if (c->curve) {
		memcpy(c->pub, o->public_key, 41);
		memcpy(c->sec, o->secret_key, 41);
	}
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
	c->attempt_ms = n == 1 ? c->timeout_ms : o->attempt_ms > 0 ? o->attempt_ms : 1000;
	if (!(c->ctx = zmq_ctx_new())) {
		tsec_client_close(&c);
		return tsec__seterr(err, TSEC_ENOMEM, "", "cannot create a ZeroMQ context");
	}
	if ((rc = connect_cur(c, err))) {
		tsec_client_close(&c);
		return rc;
	}
	*out = c;
	return 0;
}

void tsec_client_close(struct tsec_client **pc)
{
	struct tsec_client *c;

	if (!pc || !*pc)
		return;
	c = *pc;
	if (c->mon)
		zmq_close(c->mon);
	if (c->sock) {
		z_monitor(c->sock, NULL, 0);
		zmq_close(c->sock);
	}
	/* Restarted when a signal interrupts it, as ZeroMQ asks: else its
	 * I/O thread would be left running. */
	while (c->ctx && zmq_ctx_term(c->ctx) < 0 && errno == EINTR)
		;
	for (size_t i = 0; i < 2 * ENDPOINTS_MAX; i++)
		free(c->owned[i]);
	close(c->wake);
	memset(c->sec, 0, sizeof(c->sec));
	free(c->last_error);
	free(c);
	*pc = NULL;
}

const char *tsec_client_last_error(const struct tsec_client *c)
{
	return c ? c->last_error : NULL;
}

int tsec_client_set_timeout(struct tsec_client *c, int timeout_ms)
{
	if (!c || timeout_ms <= 0)
		return TSEC_EINVAL;
	c->timeout_ms = timeout_ms;
	/* One broker: an attempt is the whole call, as at open. */
	if (c->nep == 1)
		c->attempt_ms = timeout_ms;
	return 0;
}

static int no_reply(struct tsec_client *c, struct tsec_error *err);

/*
 * One part, never blocking; again when a signal interrupted it.  The
 * host's signals are not ours to fail on: Go's runtime preempts a
 * thread in a cgo call with SIGURG, and a call failed "send: Interrupted
 * system call" (issue 35).  A message's later parts always go once its
 * first went, so a retried part never doubles one before it.
 */
static int send_part(void *sock, const void *buf, size_t len, int flags)
{
	int rc;

	do
		rc = zmq_send(sock, buf, len, flags | ZMQ_DONTWAIT);
	while (rc < 0 && errno == EINTR);
	return rc;
}

static void frames_drop(struct frames *fr)
{
	if (fr && fr->out) {
		tsec_client_frames_free(fr->out, fr->nout);
		fr->nout = 0;
	}
}

void tsec_client_frames_free(struct tsec_client_frame *f, size_t n)
{
	for (size_t i = 0; f && i < n; i++) {
		if (f[i].data) {
			sodium_memzero((void *)f[i].data, f[i].len);
			free((void *)f[i].data);
		}
		f[i].data = NULL;
		f[i].len = 0;
	}
}

int tsec__client_send(struct tsec_client *c, const void *frame, size_t len,
		      const struct frames *fr, int64_t deadline, bool wakeable,
		      struct tsec_error *err)
{
	size_t nin = fr ? fr->nin : 0;

	for (size_t tries = 0;; tries++) {
		zmq_pollitem_t it[2] = { { c->sock, 0, ZMQ_POLLOUT, 0 },
					 { NULL, c->wake, ZMQ_POLLIN, 0 } };
		int64_t left = deadline - tsec__mono_ms();
		long wait = (long)(left < c->attempt_ms ? left : c->attempt_ms);
		int ready;

		if (wakeable && tsec__client_interrupted(c))
			return tsec__seterr(err, TSEC_ECANCELED, "", "interrupted before it was sent");
		if (left <= 0)
			return no_reply(c, err);
		/*
		 * Never a send that may block past the deadline: with one
		 * broker ZeroMQ queues until it connects, but a connection
		 * the broker refused (an unknown key) leaves no pipe to queue
		 * on until it reconnects, and a blocking send waited for ever
		 * there (seen once in about 90 runs of test_daemon_cli).
		 */
		ready = zmq_poll(it, wakeable ? 2 : 1, wait);
		if (ready < 0 && errno == EINTR)
			continue;    /* a signal, not a broker that is away */
		if (ready > 0 && !(it[0].revents & ZMQ_POLLOUT))
			continue;    /* the interrupt: seen at the top */
		if (ready > 0) {
			if (send_part(c->sock, "", 0, ZMQ_SNDMORE) >= 0 &&
			    send_part(c->sock, frame, len, nin ? ZMQ_SNDMORE : 0) >= 0) {
				/* The first part went: the rest go too (ZeroMQ
				 * takes a message's parts whole or not at all). */
				for (size_t i = 0; i < nin; i++)
					if (send_part(c->sock, fr->in[i].data, fr->in[i].len,
						      i + 1 < nin ? ZMQ_SNDMORE : 0) < 0)
						return tsec__seterr(err, TSEC_EIO, "", "send: %s",
								    zmq_strerror(errno));
				return 0;
			}
			if (errno != EAGAIN)
				return tsec__seterr(err, TSEC_EIO, "", "send: %s", zmq_strerror(errno));
		}
		if (c->nep == 1)
			continue;    /* the same broker until the deadline */
		c->cur = (c->cur + 1) % c->nep;
		if (connect_cur(c, err))
			return TSEC_EIO;
	}
}

/* Reads the monitor's pending events into c->seen. */
static void drain_events(struct tsec_client *c)
{
	for (;;) {
		zmq_msg_t m;
		uint16_t ev;

		if (!c->mon)
			return;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, c->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return;
		}
		if (zmq_msg_size(&m) >= 2) {
			memcpy(&ev, zmq_msg_data(&m), 2);
			c->seen |= ev;
		}
		zmq_msg_close(&m);
		/* The event's second frame: the endpoint. */
		zmq_msg_init(&m);
		zmq_msg_recv(&m, c->mon, ZMQ_DONTWAIT);
		zmq_msg_close(&m);
	}
}

/*
 * Why a call got no reply in time: nobody accepted the connection, the
 * broker refused this client's key, or it took the call and did not
 * answer.
 */
static int no_reply(struct tsec_client *c, struct tsec_error *err)
{
	const char *ep = c->ep[c->cur].endpoint;

	drain_events(c);
	if (c->seen & ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
		return c->ep[c->cur].server_public_key
			? tsec__seterr(err, TSEC_EAUTH, ep, "authentication refused by the broker "
				       "at %s: it does not know this client's key", ep)
			: tsec__seterr(err, TSEC_EAUTH, ep, "the broker at %s refused this client: "
				       "this user (uid %u) is not among its clients",
				       ep, (unsigned)getuid());
	if (c->seen & (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
		return tsec__seterr(err, TSEC_EAUTH, ep, "the handshake with %s failed (a server "
				    "key that is not the broker's, or not a tsec-broker)", ep);
	if (c->mon && !(c->seen & ZMQ_EVENT_CONNECTED))
		return tsec__seterr(err, TSEC_EUNREACHABLE, ep, "no broker listening at %s (nothing "
				    "accepted the connection in %d ms)", ep, c->timeout_ms);
	return tsec__seterr(err, TSEC_EUNREACHABLE, ep, "the broker at %s took the call and did "
			    "not answer in %d ms", ep, c->timeout_ms);
}

int tsec__client_recv(struct tsec_client *c, int64_t deadline, bool wakeable, char **out,
		      struct frames *fr, struct tsec_error *err)
{
	for (;;) {
		zmq_pollitem_t it[2] = { { c->sock, 0, ZMQ_POLLIN, 0 },
					 { NULL, c->wake, ZMQ_POLLIN, 0 } };
		int64_t left = deadline - tsec__mono_ms();
		zmq_msg_t m;
		int more = 1, part = 0;
		size_t msz = sizeof(more);
		char *text = NULL;
		bool bad = false;

		if (wakeable && tsec__client_interrupted(c))
			return tsec__seterr(err, TSEC_ECANCELED, "", "interrupted");
		if (left <= 0)
			return no_reply(c, err);
		if (zmq_poll(it, wakeable ? 2 : 1, (long)left) <= 0 || !(it[0].revents & ZMQ_POLLIN))
			continue;
		frames_drop(fr);
		while (more) {
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, c->sock, 0) < 0) {
				zmq_msg_close(&m);
				break;
			}
			z_getsockopt(c->sock, ZMQ_RCVMORE, &more, &msz);
			if (part++ == 0 && zmq_msg_size(&m) == 0) {
				/* the delimiter */
			} else if (!text) {
				text = strndup(zmq_msg_data(&m), zmq_msg_size(&m));
				bad |= !text;
			} else if (fr && fr->out && fr->nout < TSEC_CLIENT_MAX_FRAMES) {
				size_t n = zmq_msg_size(&m);
				void *b = malloc(n ? n : 1);

				if (b) {
					memcpy(b, zmq_msg_data(&m), n);
					fr->out[fr->nout++] = (struct tsec_client_frame){ b, n };
				}
				/* A value may be a private key: only the
				 * caller's copy is left. */
				if (n)
					sodium_memzero(zmq_msg_data(&m), n);
				bad |= !b;
			}
			/* Else frames this call did not ask for: a late reply
			 * to an earlier call's, which the id check drops. */
			zmq_msg_close(&m);
		}
		if (text && !bad) {
			*out = text;
			return 0;
		}
		free(text);
		frames_drop(fr);
		if (bad)
			return tsec__seterr(err, TSEC_ENOMEM, "", "no memory for the reply");
	}
}

/*
 * Methods that may run twice with the same effect (common/methods.h:
 * those that change nothing, and those marked so): a call of any other
 * goes to a second broker only when the first never took it.  (A put
 * sent again after a lost answer can undo a peer's write made in
 * between; an acquire sent again takes a second lease, an orphan.)
 */
bool tsec__client_resendable(const char *method)
{
	return tsec__method_flags(method) & (TSEC_M_READ | TSEC_M_RESEND);
}

/* A call that was sent and got no answer: it may have run. */
static int unknown(struct tsec_client *c, bool closed, struct tsec_error *err)
{
	const char *ep = c->ep[c->cur].endpoint;

	if (closed)
		return tsec__seterr(err, TSEC_EUNKNOWN, ep, "the broker at %s took the call and "
				    "its connection closed before the answer: it may or may not "
				    "have been applied (not sent again)", ep);
	return tsec__seterr(err, TSEC_EUNKNOWN, ep, "the broker at %s took the call and did not "
			    "answer in %d ms: it may or may not have been applied (not sent "
			    "again)", ep, c->timeout_ms);
}

/*
 * Sends frame and waits for the reply whose id is id (any reply when id
 * is 0).  With several brokers, a call that gets no answer within
 * attempt_ms goes to the next broker when it may run twice (resend);
 * any other waits for its broker until the deadline or until the
 * connection closes, and is reported as of unknown outcome.
 */
static int exchange(struct tsec_client *c, const char *frame, size_t len, struct frames *fr,
		    long id, bool resend, bool *sent, char **reply, struct tsec_error *err)
{
	int64_t deadline = tsec__mono_ms() + c->timeout_ms;

	*sent = false;
	for (;;) {
		int64_t until;
		int rc;

		/* A close seen from now on is this call's. */
		drain_events(c);
		c->seen &= ~(unsigned)ZMQ_EVENT_DISCONNECTED;
		if ((rc = tsec__client_send(c, frame, len, fr, deadline, true, err)))
			return rc;
		*sent = true;
		/* The attempt starts when a broker took the frame. */
		until = tsec__mono_ms() + c->attempt_ms;
		if (until > deadline)
			until = deadline;
		for (;;) {
			json_t *rep, *rid;

			if ((rc = tsec__client_recv(c, until, true, reply, fr, err))) {
				if (rc == TSEC_ECANCELED)
					return rc;
				if (resend || c->nep == 1)
					break;
				drain_events(c);
				if (c->seen & ZMQ_EVENT_DISCONNECTED)
					return unknown(c, true, err);
				if (tsec__mono_ms() >= deadline)
					return unknown(c, false, err);
				until = tsec__mono_ms() + c->attempt_ms;
				if (until > deadline)
					until = deadline;
				continue;
			}
			if (!id)
				return 0;
			/* The broker writes the id first: ours is told without
			 * reading the whole reply (a certificate's load is
			 * kilobytes; the caller reads it once). */
			{
				char want[40];
				int wn = snprintf(want, sizeof(want), "{\"id\":%ld,", id);

				if (wn > 0 && !strncmp(*reply, want, (size_t)wn))
					return 0;
			}
			rep = json_loads(*reply, 0, NULL);
			rid = json_object_get(rep, "id");
			/* Ours, or an error the broker could not give our id. */
			if ((json_is_integer(rid) && json_integer_value(rid) == id) ||
			    (json_is_null(rid) && json_object_get(rep, "error")) || !rep) {
				json_decref(rep);
				return 0;
			}
			json_decref(rep);
			free(*reply);
			*reply = NULL;       /* a late reply to an earlier call */
			frames_drop(fr);
		}
		if ((rc != TSEC_EUNREACHABLE && rc != TSEC_EAUTH) || c->nep == 1 ||
		    tsec__mono_ms() >= deadline)
			return rc;
		/* This broker did not answer: the next one. */
		c->cur = (c->cur + 1) % c->nep;
		if ((rc = connect_cur(c, err)))
			return rc;
	}
}

int tsec_client_raw(struct tsec_client *c, const void *frame, size_t len,
		    char **reply, struct tsec_error *err)
{
	bool sent;

	*reply = NULL;
	if (!c || (!frame && len))
		return tsec__seterr(err, TSEC_EINVAL, "", "no client or no frame");
	return exchange(c, frame, len, NULL, 0, false, &sent, reply, err);
}

static int call(struct tsec_client *c, const char *method, const char *params,
		struct frames *fr, char **result, struct tsec_error *err);

int tsec_client_call(struct tsec_client *c, const char *method,
		     const char *params, char **result, struct tsec_error *err)
{
	return call(c, method, params, NULL, result, err);
}

int tsec_client_call_frames(struct tsec_client *c, const char *method, const char *params,
			    const struct tsec_client_frame *in, size_t nin, char **result,
			    struct tsec_client_frame *out, size_t *nout, struct tsec_error *err)
{
	struct frames fr = { in, nin, out, 0 };
	int rc;

	if (nout)
		*nout = 0;
	if (result)
		*result = NULL;
	if (nin > TSEC_CLIENT_MAX_FRAMES || (nin && !in) || (out && !nout))
		return tsec__seterr(err, TSEC_EINVAL, "", "at most %d frames, each way",
				    TSEC_CLIENT_MAX_FRAMES);
	for (size_t i = 0; i < nin; i++)
		if (!in[i].data && in[i].len)
			return tsec__seterr(err, TSEC_EINVAL, "", "frame %zu has no data", i + 1);
	rc = call(c, method, params, &fr, result, err);
	if (rc)
		frames_drop(&fr);
	else if (nout)
		*nout = fr.nout;
	return rc;
}

int tsec__client_message(struct tsec_client *c, const char *method, const char *params, long id,
			 bool frames_out, char **text, struct tsec_error *err)
{
	json_t *msg = NULL, *p = NULL;
	json_error_t je;

	*text = NULL;
	/* Plain JSON read without jansson's reader (common/wire_fast.h),
	 * the rest with it: each says whether params are one JSON value. */
	if (params && !(p = tsec__fast_tree(params, strlen(params))) &&
	    !(p = json_loads(params, 0, &je)))
		return tsec__seterr(err, TSEC_EINVAL, "params", "params: %s", je.text);
	if (!p)
		p = json_object();
	if (!strcmp(method, "lock.acquire") || !params) {
		/* A broker that waits for a lock waits no longer than this
		 * call will wait for its answer: a lock taken after that
		 * would be held by nobody. */
		if (json_is_object(p) && !json_object_get(p, "deadline_ms"))
			json_object_set_new(p, "deadline_ms", json_integer(c->timeout_ms));
		msg = json_pack("{s:I,s:s,s:O}", "id", (json_int_t)id, "method", method, "params", p);
		if (msg && frames_out)
			json_object_set_new(msg, "frames", json_true());
		*text = json_dumps(msg, JSON_COMPACT);
		json_decref(msg);
	} else {
		/* The params as the caller wrote them (one JSON value, read
		 * above): not written again. */
		struct tsec__jw w;

		tsec__jw_init(&w);
		TSEC__JW_LIT(&w, "{\"id\":");
		tsec__jw_int(&w, id);
		TSEC__JW_LIT(&w, ",\"method\":");
		tsec__jw_str(&w, method, strlen(method));
		if (frames_out)
			TSEC__JW_LIT(&w, ",\"frames\":true");
		TSEC__JW_LIT(&w, ",\"params\":");
		tsec__jw_raw(&w, params, strlen(params));
		TSEC__JW_LIT(&w, "}");
		*text = tsec__jw_take(&w, NULL);
	}
	json_decref(p);
	return *text ? 0 : tsec__seterr(err, TSEC_ENOMEM, "", NULL);
}

int tsec__client_finish(struct tsec_client *c, long id, char *r, char **result,
			struct tsec_error *err)
{
	json_t *rep, *e;
	json_error_t je;
	char pre[48];
	size_t rlen = strlen(r);
	int rc;

	/* A member twice is malformed, as the fast reader says: jansson
	 * would keep the last, and the result handed on as text below would
	 * then be more than one value (found by fuzz_client:
	 * {"id":5,"result":1,"id":5} gave the result 1,"id":5). */
	if (!(rep = tsec__fast_tree(r, rlen)))
		rep = json_loads(r, JSON_REJECT_DUPLICATES, &je);
	if (!rep || !json_is_object(rep)) {
		json_decref(rep);
		free(r);
		return tsec__seterr(err, TSEC_EPROTO, "", "malformed reply");
	}
	if ((e = json_object_get(rep, "error"))) {
		rc = tsec__error_from_json(e, err);
		c->last_error = json_dumps(e, JSON_COMPACT);
	} else {
		int pn = snprintf(pre, sizeof(pre), "{\"id\":%ld,\"result\":", id);

		rc = 0;
		/* The broker's reply is {"id":N,"result":R} as it wrote it,
		 * and R's text is handed on as it is: one JSON value, since
		 * the reply read as an object of those two members only. */
		if (!json_object_get(rep, "result"))
			rc = tsec__seterr(err, TSEC_EPROTO, "", "a reply with neither a result nor "
					  "an error");
		else if (!result)
			;
		else if (json_object_size(rep) == 2 && pn > 0 && rlen > (size_t)pn + 1 &&
			 !strncmp(r, pre, (size_t)pn) && r[rlen - 1] == '}')
			*result = strndup(r + pn, rlen - (size_t)pn - 1);
		else
			*result = json_dumps(json_object_get(rep, "result"), JSON_COMPACT);
		if (!rc && result && !*result)
			rc = tsec__seterr(err, TSEC_ENOMEM, "", NULL);
	}
	json_decref(rep);
	free(r);
	return rc;
}

static int call(struct tsec_client *c, const char *method, const char *params,
		struct frames *fr, char **result, struct tsec_error *err)
{
	char *text = NULL, *r = NULL;
	bool sent;
	long id;
	int rc;

	if (result)
		*result = NULL;
	if (c) {
		free(c->last_error);
		c->last_error = NULL;
	}
	if (!c || !method)
		return tsec__seterr(err, TSEC_EINVAL, "", "no client or method");
	id = ++c->next_id;
	if ((rc = tsec__client_message(c, method, params, id, fr && fr->out, &text, err)))
		return rc;
	{
		/* Past what any broker takes, refused here at once: a broker
		 * answers too_big up to TSEC_CLIENT_MESSAGE_MAX, and nothing
		 * this library sends is larger (issue 50: a 10 MiB value
		 * waited out its timeout and came back "unreachable"). */
		size_t total = strlen(text);

		for (size_t i = 0; fr && i < fr->nin; i++)
			total += fr->in[i].len;
		if (total > TSEC_CLIENT_MESSAGE_MAX) {
			free(text);
			return tsec__seterr(err, TSEC_ETOOBIG, "", "a message of %zu bytes: past the "
					    "%u any broker takes", total, TSEC_CLIENT_MESSAGE_MAX);
		}
	}
	rc = exchange(c, text, strlen(text), fr, id, tsec__client_resendable(method), &sent, &r, err);
	free(text);
	/*
	 * Taken by a broker, and its answer no longer wanted: interrupted,
	 * or a lock wait given up at its deadline (issue 48: a paused broker
	 * that resumed took the lock for a caller that had left).  The
	 * broker drops the call, or lets go the lock it took for it.
	 */
	if (sent && (rc == TSEC_ECANCELED ||
		     (!strcmp(method, "lock.acquire") &&
		      (rc == TSEC_EUNREACHABLE || rc == TSEC_EUNKNOWN))))
		tsec__client_cancel(c, id, TSEC__CANCEL_WAIT_MS);
	if (rc == TSEC_ECANCELED)
		return tsec__seterr(err, rc, "", "interrupted: %s", sent
				    ? "the broker was told to drop the call (a lock it took for "
				      "it is let go)" : "not sent");
	return rc ? rc : tsec__client_finish(c, id, r, result, err);
}

int tsec_client_check(struct tsec_client *c, const struct tsec_request *reqs,
		      size_t n, struct tsec_decision *out, struct tsec_error *err)
{
	json_t *arr = json_array(), *params, *res = NULL, *ds;
	char *text, *result = NULL;
	json_error_t je;
	int rc;

	for (size_t i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		json_array_append_new(arr, tsec__request_to_json(&reqs[i]));
	}
	params = json_pack("{s:o}", "requests", arr);
	text = json_dumps(params, JSON_COMPACT);
	json_decref(params);
	rc = tsec_client_call(c, "check", text, &result, err);
	free(text);
	if (rc)
		return rc;
	res = json_loads(result, 0, &je);
	free(result);
	ds = json_object_get(res, "decisions");
	if (!json_is_array(ds) || json_array_size(ds) != n) {
		json_decref(res);
		return tsec__seterr(err, TSEC_EPROTO, "", "reply has the wrong number of decisions");
	}
	for (size_t i = 0; i < n; i++)
		if (tsec__decision_from_json(json_array_get(ds, i), &out[i])) {
			for (size_t j = 0; j < n; j++)
				out[j].allow = 0;
			json_decref(res);
			return tsec__seterr(err, TSEC_EPROTO, "", "malformed decision");
		}
	json_decref(res);
	return 0;
}
