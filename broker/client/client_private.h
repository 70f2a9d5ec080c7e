/*
 * Internal: the client library's connection, shared by client.c (open,
 * close, the calls that wait for their answer) and client_async.c (calls
 * answered later, interrupts and cancels).
 */
#ifndef TSEC_CLIENT_PRIVATE_H
#define TSEC_CLIENT_PRIVATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tinysecurity/client.h"

#define ENDPOINTS_MAX TSEC_CLIENT_MAX_ENDPOINTS

/* How long a cancelled call waits for the broker to say it heard. */
#define TSEC__CANCEL_WAIT_MS 500

struct tsec_client {
	void *ctx;
	void *sock;
	void *mon;                   /* the socket monitor's events */
	unsigned seen;               /* ZMQ_EVENT_* seen on this connection */
	int timeout_ms, attempt_ms;
	long next_id;
	struct tsec_client_endpoint ep[ENDPOINTS_MAX];
	char *owned[2 * ENDPOINTS_MAX];
	size_t nep, cur;
	char pub[41], sec[41];
	bool curve;
	char *last_error;            /* the last call's error object, JSON */
	/* tsec_client_interrupt: set, and the eventfd written, from any
	 * thread or a signal handler; a wait polls the eventfd beside the
	 * socket. */
	atomic_int interrupted;
	int wake;
};

/* A call's binary frames, each way. */
struct frames {
	const struct tsec_client_frame *in;
	size_t nin;
	struct tsec_client_frame *out;  /* NULL: none wanted */
	size_t nout;
};

/* Sends one request (its frame, then fr's), failing over until a broker
 * takes it, until deadline (monotonic ms).  wakeable: an interrupt ends
 * it first (TSEC_ECANCELED, nothing sent). */
int tsec__client_send(struct tsec_client *c, const void *frame, size_t len,
		      const struct frames *fr, int64_t deadline, bool wakeable,
		      struct tsec_error *err);
/* Waits for one reply until deadline: its text (new) into *out and, when
 * fr wants them, its binary frames.  wakeable: TSEC_ECANCELED when an
 * interrupt comes first. */
int tsec__client_recv(struct tsec_client *c, int64_t deadline, bool wakeable, char **out,
		      struct frames *fr, struct tsec_error *err);
/* The message of a call (new text in *text). */
int tsec__client_message(struct tsec_client *c, const char *method, const char *params, long id,
			 bool frames_out, char **text, struct tsec_error *err);
/* Reads a reply's text r (consumed) as the answer to call id: 0 with the
 * result's text in *result (when result), or the error reply's code. */
/* Whether a call of method may go to a second broker after the first took
 * it and gave no answer: it changes nothing, or the same however often. */
bool tsec__client_resendable(const char *method);

int tsec__client_finish(struct tsec_client *c, long id, char *r, char **result,
			struct tsec_error *err);
/* Whether an interrupt came (taken: the eventfd emptied, the flag off). */
bool tsec__client_interrupted(struct tsec_client *c);
/* Tells the broker the answer to call id is not wanted, and waits up to
 * wait_ms for it to say it heard (0: no wait). */
void tsec__client_cancel(struct tsec_client *c, long id, int wait_ms);

#endif
