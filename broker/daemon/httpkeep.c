/*
 * tsec-broker: keeping the HTTP listeners' places for those who ask
 * (httpkeep.h).  Issue 34, item 11: idle connections filled the metrics
 * listener's limit.  Issue 52, item 6: under churn, stamps by the
 * millisecond made every connection look equally idle and closed probes
 * that had just asked; a probe taken before its request reached the
 * kernel looked like a silent churner and was closed 33 arrivals later;
 * the ask listener gave each silent connection a thread for 10 s.
 */
#include <errno.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker/daemon/httpkeep.h"

struct tsec__kconn {
	struct tsec__kconn *prev, *next;
	int fd;
	uint64_t stamp;          /* last request, or the connection's opening */
	bool closing;
	bool answering;          /* asked, and not yet answered in full */
};

int tsec__http_listen(const struct sockaddr_in *a, int defer_s)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1, e;

	if (fd < 0)
		return -1;
	if (!setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) &&
	    !setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s)) &&
	    !bind(fd, (const struct sockaddr *)a, sizeof(*a)) && !listen(fd, SOMAXCONN))
		return fd;
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

int tsec__keeper_init(struct tsec__keeper *k, unsigned keep, _Atomic uint64_t *closed)
{
	*k = (struct tsec__keeper){ .keep = keep, .closed = closed };
	return pthread_mutex_init(&k->mu, NULL);
}

void tsec__keeper_fini(struct tsec__keeper *k)
{
	pthread_mutex_destroy(&k->mu);
}

/*
 * The closable connection with the oldest stamp above floor: not one
 * already closing, nor one being answered.
 */
static struct tsec__kconn *oldest_above(struct tsec__keeper *k, uint64_t floor)
{
	struct tsec__kconn *best = NULL;

	for (struct tsec__kconn *o = k->conns; o; o = o->next)
		if (!o->closing && !o->answering && o->stamp > floor &&
		    (!best || o->stamp < best->stamp))
			best = o;
	return best;
}

/* Bytes wait in the kernel that MHD has not read yet: a request arriving. */
static bool sent_unread(int fd)
{
	int n = 0;

	return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/*
 * One over keep: close the oldest connection that is not asking.  One
 * whose request waits unread is spared.  Each try costs one ioctl;
 * nothing is closed when everyone is asking, and MHD's own limit bounds
 * the rest.  MHD tells of a close (and so of the fd's reuse) under k->mu.
 */
static void evict(struct tsec__keeper *k)
{
	uint64_t floor = 0;
	struct tsec__kconn *o;

	while ((o = oldest_above(k, floor)) && sent_unread(o->fd))
		floor = o->stamp;
	if (!o)
		return;
	/* MHD sees the socket end at its next poll and closes it. */
	o->closing = true;
	shutdown(o->fd, SHUT_RDWR);
	atomic_fetch_add(k->closed, 1);
}

static void forget(struct tsec__keeper *k, struct tsec__kconn *m)
{
	if (m->prev)
		m->prev->next = m->next;
	else
		k->conns = m->next;
	if (m->next)
		m->next->prev = m->prev;
	k->n--;
	free(m);
}

void tsec__keeper_noted(void *cls, struct MHD_Connection *conn, void **ctx,
			enum MHD_ConnectionNotificationCode toe)
{
	struct tsec__keeper *k = cls;
	struct tsec__kconn *m = *ctx;
	const union MHD_ConnectionInfo *ci;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (m) {
			pthread_mutex_lock(&k->mu);
			forget(k, m);
			pthread_mutex_unlock(&k->mu);
		}
		*ctx = NULL;
		return;
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || !(m = calloc(1, sizeof(*m))))
		return;                  /* not tracked: MHD's limit still holds */
	m->fd = ci->connect_fd;
	pthread_mutex_lock(&k->mu);
	if (++k->n > k->keep)
		evict(k);                /* before m joins: never the newcomer */
	m->stamp = ++k->stamp;
	m->next = k->conns;
	if (k->conns)
		k->conns->prev = m;
	k->conns = m;
	pthread_mutex_unlock(&k->mu);
	*ctx = m;
}

static struct tsec__kconn *kconn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void tsec__keeper_asking(struct tsec__keeper *k, struct MHD_Connection *conn)
{
	struct tsec__kconn *m = kconn_of(conn);

	if (!m)
		return;
	pthread_mutex_lock(&k->mu);
	m->stamp = ++k->stamp;
	m->answering = true;
	pthread_mutex_unlock(&k->mu);
}

/* A request ended (answered, or its connection went): closable again. */
void tsec__keeper_answered(void *cls, struct MHD_Connection *conn, void **con_cls,
			   enum MHD_RequestTerminationCode toe)
{
	struct tsec__keeper *k = cls;
	struct tsec__kconn *m = kconn_of(conn);

	(void)con_cls;
	(void)toe;
	if (!m)
		return;
	pthread_mutex_lock(&k->mu);
	m->answering = false;
	pthread_mutex_unlock(&k->mu);
}
