/*
 * tsec-broker: what the two HTTP listeners (metrics.c, ask.c) share so that
 * connections held open without asking cannot lock out those that ask.
 *
 * A connection reaches libmicrohttpd only once it has sent something: the
 * listening socket is ours, with TCP_DEFER_ACCEPT (tsec__http_listen).
 * Each connection MHD takes is stamped from one counter when it opens and
 * each time it asks; past keep open connections a newcomer closes the one
 * with the oldest stamp, never one being answered nor one whose request
 * waits unread in the kernel, and never the newcomer.  A keeper's
 * callbacks may run in several threads (a thread per connection): one
 * mutex.
 */
#ifndef TSEC_DAEMON_HTTPKEEP_H
#define TSEC_DAEMON_HTTPKEEP_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <microhttpd.h>

struct tsec__kconn;

struct tsec__keeper {
	pthread_mutex_t mu;
	struct tsec__kconn *conns;   /* open connections MHD told us of */
	unsigned n, keep;
	uint64_t stamp;              /* the counter stamps come from */
	_Atomic uint64_t *closed;    /* counts the connections closed */
};

/* A listening socket bound to a, the kernel holding each connection until
 * its first bytes arrive (up to defer_s seconds, then it is handed over
 * as any other).  The socket, or -1 with errno. */
int tsec__http_listen(const struct sockaddr_in *a, int defer_s);

/* Sets k up to keep that many connections, counting those it closes in
 * *closed.  0 or an errno value. */
int tsec__keeper_init(struct tsec__keeper *k, unsigned keep, _Atomic uint64_t *closed);
/* After MHD_stop_daemon: nothing is left but the mutex. */
void tsec__keeper_fini(struct tsec__keeper *k);

/* MHD_OPTION_NOTIFY_CONNECTION and MHD_OPTION_NOTIFY_COMPLETED, cls k. */
void tsec__keeper_noted(void *k, struct MHD_Connection *conn, void **ctx,
			enum MHD_ConnectionNotificationCode toe);
void tsec__keeper_answered(void *k, struct MHD_Connection *conn, void **con_cls,
			   enum MHD_RequestTerminationCode toe);
/* The access handler calls this first: conn asks, and is not closed
 * until its answer is sent (tsec__keeper_answered). */
void tsec__keeper_asking(struct tsec__keeper *k, struct MHD_Connection *conn);

#endif
