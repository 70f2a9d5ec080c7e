/*
 * tinysecurity client: calls tsec-broker from another process over
 * ZeroMQ.  The broker decides who the caller is from the connection
 * (CURVE key over tcp, peer uid over ipc); nothing the client sends can
 * change that.
 *
 * A client is one connection at a time (to one of its brokers); use it
 * from one thread at a time (but for tsec_client_interrupt).
 */
#ifndef TINYSECURITY_CLIENT_H
#define TINYSECURITY_CLIENT_H

#include <stddef.h>

#include "tinysecurity/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tsec_client;

/* One broker of several: where, and its CURVE public key. */
struct tsec_client_endpoint {
	const char *endpoint;
	const char *server_public_key;
};

struct tsec_client_opts {
	/* sizeof(struct tsec_client_opts) the caller was built with, or 0 for
	 * TSEC_CLIENT_OPTS_MIN_SIZE (this struct's first size): see TSEC_OPTS_HAS. */
	size_t size;
	const char *endpoint;            /* "tcp://host:port" or "ipc://path" */
	const char *server_public_key;   /* Z85 (40 chars); tcp needs it, and
					    ipc when the broker sets ipc_curve */
	const char *public_key;          /* the client's CURVE key pair, Z85 */
	const char *secret_key;
	int timeout_ms;                  /* per call; 0 means 5000 */
	/*
	 * Several brokers over one shared backend (then endpoint is unused):
	 * a call goes to one; when it does not answer within attempt_ms
	 * (default 1000, ZeroMQ heartbeats drop a dead connection), the
	 * client reconnects to the next and sends the call again, until
	 * timeout_ms, but only a call that may run twice with the same
	 * effect: one that changes nothing, lock.renew and cert.obtain
	 * (tsec-broker --methods says which; tsec-broker(8), METHODS).
	 * Any other call a broker took and did
	 * not answer (store.put/delete/move, lock.acquire/release, ...)
	 * is never sent again: it returns TSEC_EUNKNOWN, "may or may not
	 * have been applied", and the caller reads to find out.  A call no
	 * broker took is sent to the next one.
	 */
	const struct tsec_client_endpoint *endpoints;
	size_t nendpoints;
	int attempt_ms;
};

/* The first size of struct tsec_client_opts (what size 0 stands for). */
#define TSEC_CLIENT_OPTS_MIN_SIZE \
	(offsetof(struct tsec_client_opts, attempt_ms) + sizeof(((struct tsec_client_opts *)0)->attempt_ms))

/* Connects (lazily, as ZeroMQ does).  0, TSEC_EINVAL or TSEC_ENOMEM. */
TSEC_API int tsec_client_open(struct tsec_client **out,
		     const struct tsec_client_opts *opts,
		     struct tsec_error *err);

/* Closes; *c = NULL.  Accepts NULL. */
TSEC_API void tsec_client_close(struct tsec_client **c);

/*
 * Calls a method with params (a JSON object as text, or NULL) and waits
 * for the reply.  On success *result is the reply's result as new JSON
 * text (free() it; result may be NULL to ignore it).  An error reply
 * returns its negative TSEC_E* code with the broker's message in err.
 * When the call got no reply: TSEC_EAUTH when the broker refused this
 * client (its CURVE key, or over ipc its user) or the handshake failed
 * (a server key that is not the broker's); TSEC_EUNREACHABLE when
 * nothing accepted the connection, or it took the call and did not
 * answer in time (with several brokers, a call that may not be sent
 * again returns TSEC_EUNKNOWN instead, as above).  A lock.acquire that
 * got no answer in time is cancelled at the broker (tsec_client_cancel)
 * before the call returns, so that a broker that was paused and resumes
 * takes no lock for a caller that has stopped waiting.
 */
TSEC_API int tsec_client_call(struct tsec_client *c, const char *method,
		     const char *params, char **result,
		     struct tsec_error *err);

/*
 * Bytes that travel beside a call's JSON, each as a ZeroMQ frame of its
 * own: a certificate, a key or any value, sent and received as they are,
 * never escaped or base64'd into the JSON.
 */
#define TSEC_CLIENT_MAX_FRAMES 3

/* The most brokers one client may be given (tsec_client_opts.endpoints). */
#define TSEC_CLIENT_MAX_ENDPOINTS 16
/*
 * The largest message (its JSON and frames) a call sends: a broker's
 * max_message is at most 64 MiB, and every broker answers a message up to
 * this size, too_big when it passes its own max_message (default 16 MiB
 * and 64 KiB: a 16 MiB value and its call).  Larger: TSEC_ETOOBIG here,
 * nothing sent.
 */
#define TSEC_CLIENT_MESSAGE_MAX ((64u << 20) + (64u << 10))
struct tsec_client_frame {
	const void *data;
	size_t len;
};

/*
 * tsec_client_call with frames.  in[0..nin) (nin at most
 * TSEC_CLIENT_MAX_FRAMES) go after the params, and the params name each
 * by a member "<name>_frame": N, counting from 1, where the method takes
 * "<name>" as a string: "value_frame" (store.put, and each of
 * store.put_many's puts), "cert_frame", "key_frame" and "meta_frame"
 * (store.save_cert, remote.publish).  Each frame must be named once.
 *
 * With out given (room for TSEC_CLIENT_MAX_FRAMES), the broker answers
 * values as frames too: the result says "value_frame": N (store.get) or
 * "cert_frame", "key_frame" and "meta_frame" (store.load_cert,
 * remote.load), and the frames are out[0..*nout), each new (free them
 * with tsec_client_frames_free).  On an error *nout is 0.
 */
TSEC_API int tsec_client_call_frames(struct tsec_client *c, const char *method,
				     const char *params, const struct tsec_client_frame *in,
				     size_t nin, char **result, struct tsec_client_frame *out,
				     size_t *nout, struct tsec_error *err);

/* Frees the n frames a call returned (their bytes wiped: one may be a
 * private key).  Accepts NULL. */
TSEC_API void tsec_client_frames_free(struct tsec_client_frame *f, size_t n);

/*
 * The error object of the last tsec_client_call's error reply, as JSON
 * text: {"code", "errno", "message", "where"?}, and for a call the
 * policy refused "reason" and "rules" (the deciding rule ids; empty when
 * nothing allowed it).  Owned by c, valid until its next call; NULL when
 * the last call succeeded or got no reply.
 */
TSEC_API const char *tsec_client_last_error(const struct tsec_client *c);

/*
 * Sets the per-call timeout (opts.timeout_ms) for the calls that follow,
 * for a caller whose own deadline varies.  0, or TSEC_EINVAL for a value
 * not above 0.
 */
TSEC_API int tsec_client_set_timeout(struct tsec_client *c, int timeout_ms);

/*
 * Sends one raw frame as a request and returns the raw reply (new text),
 * for tests and tools that speak the wire themselves.
 */
TSEC_API int tsec_client_raw(struct tsec_client *c, const void *frame, size_t len,
		    char **reply, struct tsec_error *err);

/*
 * Ends the wait of the call in progress on c, or of the next one if none
 * is: it returns TSEC_ECANCELED.  A call the broker took is cancelled
 * there first (see tsec_client_cancel), and the call waits up to half a
 * second for the broker to say it heard, so that a process that exits
 * at once (^C) takes no lock with it.  tsec_client_next returns
 * TSEC_ECANCELED at once instead, having read nothing.  Safe from any
 * thread and from a signal handler (a flag and a write to an eventfd);
 * the only call on c that may run beside another.
 */
TSEC_API void tsec_client_interrupt(struct tsec_client *c);

/*
 * Calls answered later: many may be in flight on one connection, so a
 * host that waits for many locks holds one connection for all of them.
 * tsec_client_send sends a call as tsec_client_call would (a
 * lock.acquire carries the client's timeout as its deadline_ms) and
 * returns at once with its id in *id; it is never sent again to another
 * broker.  tsec_client_next waits up to timeout_ms for the next answer
 * to any call sent so: its call's id in *id (0 for an answer to no
 * call), and its result (*result, new text) or its error code as
 * tsec_client_call's; TSEC_ETIMEDOUT (*id 0) when none came in time,
 * TSEC_ECANCELED (*id 0) when tsec_client_interrupt woke it.
 * tsec_client_cancel tells the broker the answer to call id is not
 * wanted: a call still queued or waiting for a lock is dropped (answered
 * "cancelled"), and a lock taken for it, even one answered already, is
 * let go.  It does not wait: the cancel's own answer comes through
 * tsec_client_next with an id of its own.
 */
TSEC_API int tsec_client_send(struct tsec_client *c, const char *method, const char *params,
			      long *id, struct tsec_error *err);
TSEC_API int tsec_client_next(struct tsec_client *c, int timeout_ms, long *id, char **result,
			      struct tsec_error *err);
TSEC_API int tsec_client_cancel(struct tsec_client *c, long id, struct tsec_error *err);

/*
 * Check through the broker: n requests (their principal and roles are
 * ignored), one decision each.  Any failure leaves every decision a deny.
 */
TSEC_API int tsec_client_check(struct tsec_client *c, const struct tsec_request *reqs,
		      size_t n, struct tsec_decision *out,
		      struct tsec_error *err);

#ifdef __cplusplus
}
#endif

#endif
