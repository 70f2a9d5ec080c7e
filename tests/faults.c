/* The fault-injecting proxy (faults.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/faults.h"

#define CONNS_MAX 512
#define TICK_MS 5                /* how soon a mode change or cut is seen */

struct conn {
	struct tu_proxy *p;
	int cfd, sfd;
	unsigned gen;                /* the cut generation it was born in */
	atomic_bool marked;          /* its requests carried the needle */
	pthread_t th;
};

struct tu_proxy {
	int lfd, upstream;
	atomic_int mode, stop;
	atomic_int marked_mode;      /* -1: as mode */
	char needle[64];             /* set before connections */
	atomic_uint gen;
	atomic_size_t sent, accepted, dropped;
	pthread_t th;
	pthread_mutex_t mu;
	struct conn *conns[CONNS_MAX];
	size_t nconns;
};

static bool pump(int from, int to, bool forward, atomic_size_t *count, atomic_size_t *lost,
		 struct conn *mark)
{
	char buf[16384];
	ssize_t n = read(from, buf, sizeof(buf));

	if (n <= 0)
		return n < 0 && (errno == EINTR || errno == EAGAIN);
	if (mark && mark->p->needle[0] &&
	    memmem(buf, (size_t)n, mark->p->needle, strlen(mark->p->needle)))
		atomic_store(&mark->marked, true);
	if (!forward) {
		atomic_fetch_add(lost, (size_t)n);
		return true;
	}
	for (ssize_t off = 0; off < n;) {
		ssize_t w = write(to, buf + off, (size_t)(n - off));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		off += w;
	}
	if (count)
		atomic_fetch_add(count, (size_t)n);
	return true;
}

static void *serve(void *arg)
{
	struct conn *c = arg;
	struct tu_proxy *p = c->p;

	while (!atomic_load(&p->stop) && atomic_load(&p->gen) == c->gen) {
		int mm = atomic_load(&p->marked_mode);
		int mode = atomic_load(&c->marked) && mm >= 0 ? mm : atomic_load(&p->mode);
		struct pollfd fds[2] = {
			{ c->cfd, mode == TU_HANG ? 0 : POLLIN, 0 },
			{ c->sfd, mode == TU_HANG ? 0 : POLLIN, 0 },
		};
		int n = poll(fds, 2, TICK_MS);

		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		/* A fault set while we polled applies to what arrived. */
		mode = atomic_load(&c->marked) && atomic_load(&p->marked_mode) >= 0 ?
		       atomic_load(&p->marked_mode) : atomic_load(&p->mode);
		if (mode == TU_HANG)
			continue;
		if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    !pump(c->cfd, c->sfd, true, &p->sent, NULL, c))
			break;
		if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    !pump(c->sfd, c->cfd, mode != TU_DROP, NULL, &p->dropped, NULL))
			break;
	}
	shutdown(c->cfd, SHUT_RDWR);
	shutdown(c->sfd, SHUT_RDWR);
	return NULL;
}

static int upstream_fd(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void *acceptor(void *arg)
{
	struct tu_proxy *p = arg;

	while (!atomic_load(&p->stop)) {
		struct pollfd pf = { p->lfd, POLLIN, 0 };
		struct conn *c;
		int cfd, sfd;

		if (poll(&pf, 1, TICK_MS) <= 0)
			continue;
		if ((cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		atomic_fetch_add(&p->accepted, 1);
		if ((sfd = upstream_fd(p->upstream)) < 0) {
			close(cfd);
			continue;
		}
		pthread_mutex_lock(&p->mu);
		if (p->nconns == CONNS_MAX || !(c = calloc(1, sizeof(*c)))) {
			pthread_mutex_unlock(&p->mu);
			close(cfd);
			close(sfd);
			continue;
		}
		*c = (struct conn){ .p = p, .cfd = cfd, .sfd = sfd, .gen = atomic_load(&p->gen) };
		if (pthread_create(&c->th, NULL, serve, c)) {
			free(c);
			close(cfd);
			close(sfd);
		} else {
			p->conns[p->nconns++] = c;
		}
		pthread_mutex_unlock(&p->mu);
	}
	return NULL;
}

struct tu_proxy *tu_proxy_start(int upstream_port, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	struct tu_proxy *p = calloc(1, sizeof(*p));
	int one = 1;

	if (!p)
		return NULL;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	p->upstream = upstream_port;
	atomic_init(&p->marked_mode, -1);
	pthread_mutex_init(&p->mu, NULL);
	if ((p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(p->lfd, 64) ||
	    getsockname(p->lfd, (struct sockaddr *)&a, &al) ||
	    pthread_create(&p->th, NULL, acceptor, p)) {
		if (p->lfd >= 0)
			close(p->lfd);
		free(p);
		return NULL;
	}
	*port = ntohs(a.sin_port);
	return p;
}

void tu_proxy_set(struct tu_proxy *p, enum tu_fault f)
{
	atomic_store(&p->mode, (int)f);
}

void tu_proxy_mark(struct tu_proxy *p, const char *needle)
{
	snprintf(p->needle, sizeof(p->needle), "%s", needle);
}

void tu_proxy_set_marked(struct tu_proxy *p, enum tu_fault f)
{
	atomic_store(&p->marked_mode, (int)f);
}

void tu_proxy_cut(struct tu_proxy *p)
{
	atomic_fetch_add(&p->gen, 1);
}

size_t tu_proxy_sent(struct tu_proxy *p)
{
	return atomic_load(&p->sent);
}

size_t tu_proxy_accepted(struct tu_proxy *p)
{
	return atomic_load(&p->accepted);
}

size_t tu_proxy_dropped(struct tu_proxy *p)
{
	return atomic_load(&p->dropped);
}

void tu_proxy_stop(struct tu_proxy *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, 1);
	pthread_join(p->th, NULL);
	for (size_t i = 0; i < p->nconns; i++) {
		pthread_join(p->conns[i]->th, NULL);
		close(p->conns[i]->cfd);
		close(p->conns[i]->sfd);
		free(p->conns[i]);
	}
	close(p->lfd);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int tu_port_of(const char *endpoint)
{
	const char *colon = strrchr(endpoint, ':');

	return colon ? atoi(colon + 1) : -1;
}
