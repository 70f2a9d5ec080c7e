/*
 * The client library's calls whose answers come later, and how a call is
 * given up: an interrupt (from another thread or a signal handler) ends
 * the wait for an answer, and a cancel tells the broker the answer is no
 * longer wanted, so that it drops the call or lets go the lock it took
 * for it (issue 48: a lock taken for a caller that had gone was held by
 * nobody for its whole lease).
 *
 * Many calls may be in flight on one connection (tsec_client_send, each
 * answer read by tsec_client_next): a host that waits for many locks
 * holds one connection for all of them, not one each (the Go binding's
 * Locker).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "broker/client/client_private.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/wire_fast.h"

void tsec_client_interrupt(struct tsec_client *c)
{
	uint64_t one = 1;
	ssize_t r;

	if (!c)
		return;
	/* Async-signal-safe: a lock-free store and a write. */
	atomic_store(&c->interrupted, 1);
	r = write(c->wake, &one, sizeof(one));
	(void)r;
}

bool tsec__client_interrupted(struct tsec_client *c)
{
	uint64_t n;

	if (!atomic_exchange(&c->interrupted, 0))
		return false;
	while (read(c->wake, &n, sizeof(n)) == (ssize_t)sizeof(n))
		;
	return true;
}

/* Sends the cancel of call id: its own id, or 0 when it did not go. */
static long send_cancel(struct tsec_client *c, long id, int64_t deadline)
{
	char frame[96];
	long cid = ++c->next_id;
	int n = snprintf(frame, sizeof(frame),
			 "{\"id\":%ld,\"method\":\"cancel\",\"params\":{\"id\":%ld}}", cid, id);
	struct tsec_error ignored;

	if (tsec__client_send(c, frame, (size_t)n, NULL, deadline, false, &ignored))
		return 0;
	return cid;
}

void tsec__client_cancel(struct tsec_client *c, long id, int wait_ms)
{
	int64_t deadline = tsec__mono_ms() + (wait_ms > 0 ? wait_ms : 100);
	long cid = send_cancel(c, id, deadline);
	struct tsec_error ignored;
	char want[40], *r = NULL;
	int wn;

	if (!cid || wait_ms <= 0)
		return;
	/* Its answer, the call's own answer (if it comes) dropped: the broker
	 * has heard before this returns, so that a process about to exit
	 * does not take the cancel with it. */
	wn = snprintf(want, sizeof(want), "{\"id\":%ld,", cid);
	while (!tsec__client_recv(c, deadline, false, &r, NULL, &ignored)) {
		bool mine = !strncmp(r, want, (size_t)wn);

		free(r);
		r = NULL;
		if (mine)
			break;
	}
}

int tsec_client_send(struct tsec_client *c, const char *method, const char *params, long *id,
		     struct tsec_error *err)
{
	char *text = NULL;
	int rc;

	if (id)
		*id = 0;
	if (!c || !method || !id)
		return tsec__seterr(err, TSEC_EINVAL, "", "no client, method or id");
	*id = ++c->next_id;
	if ((rc = tsec__client_message(c, method, params, *id, false, &text, err)))
		return rc;
	rc = tsec__client_send(c, text, strlen(text), NULL, tsec__mono_ms() + c->timeout_ms, false,
			       err);
	free(text);
	return rc;
}

int tsec_client_next(struct tsec_client *c, int timeout_ms, long *id, char **result,
		     struct tsec_error *err)
{
	char *r = NULL;
	json_t *rep;
	int rc;

	if (id)
		*id = 0;
	if (result)
		*result = NULL;
	if (!c || !id)
		return tsec__seterr(err, TSEC_EINVAL, "", "no client or id");
	free(c->last_error);
	c->last_error = NULL;
	rc = tsec__client_recv(c, tsec__mono_ms() + (timeout_ms > 0 ? timeout_ms : 0), true, &r,
			       NULL, err);
	if (rc == TSEC_ECANCELED)
		return rc;
	if (rc)
		return tsec__seterr(err, TSEC_ETIMEDOUT, "", "no answer within %d ms", timeout_ms);
	/* The broker writes the id first; an answer without one (an error it
	 * could not give an id) is the answer to no call. */
	if ((rep = tsec__fast_tree(r, strlen(r))) || (rep = json_loads(r, 0, NULL))) {
		json_t *v = json_object_get(rep, "id");

		*id = json_is_integer(v) ? (long)json_integer_value(v) : 0;
		json_decref(rep);
	}
	return tsec__client_finish(c, *id, r, result, err);
}

int tsec_client_cancel(struct tsec_client *c, long id, struct tsec_error *err)
{
	if (!c || id <= 0)
		return tsec__seterr(err, TSEC_EINVAL, "", "no client or call");
	return send_cancel(c, id, tsec__mono_ms() + c->timeout_ms)
		? 0 : tsec__seterr(err, TSEC_EUNREACHABLE, "", "the cancel could not be sent");
}
