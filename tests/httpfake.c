/* The tests' scripted HTTP server (tests/httpfake.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/httpfake.h"

int tu_http_read_request(int fd, char *head, size_t cap, unsigned char **body, size_t *blen)
{
	size_t n = 0, want, have;
	char *end, *cl, *ex;
	unsigned char *b = NULL;

	if (body)
		*body = NULL;
	if (blen)
		*blen = 0;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap || (r = read(fd, head + n, cap - 1 - n)) <= 0)
			return -1;
		n += (size_t)r;
		head[n] = '\0';
		if ((end = strstr(head, "\r\n\r\n")))
			break;
	}
	cl = strcasestr(head, "\r\ncontent-length:");
	want = cl ? strtoul(cl + 17, NULL, 10) : 0;
	if (want > TU_HTTP_BODY_MAX)
		return -1;
	have = n - (size_t)(end + 4 - head);
	if (body && !(b = malloc(want + 1)))
		return -1;
	if (b)
		memcpy(b, end + 4, have < want ? have : want);
	ex = strcasestr(head, "\r\nexpect:");
	if (ex && have < want && strcasestr(ex, "100-continue")) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

		if (write(fd, cont, sizeof(cont) - 1) < 0)
			goto fail;
	}
	while (have < want) {
		char sink[4096];
		ssize_t r = b ? read(fd, b + have, want - have)
			      : read(fd, sink, want - have < sizeof(sink) ? want - have : sizeof(sink));

		if (r <= 0)
			goto fail;
		have += (size_t)r;
	}
	if (body)
		*body = b;
	if (blen)
		*blen = want;
	end[2] = '\0';              /* the head ends with its last header's CRLF */
	return 0;
fail:
	free(b);
	return -1;
}

static void *serve(void *arg)
{
	struct tu_fake *f = arg;

	while (!atomic_load(&f->stop)) {
		struct pollfd p = { f->lfd, POLLIN, 0 };
		char head[16384], target[2048] = "", out[8192];
		const struct tu_fake_rule *r = NULL;
		char *body;
		size_t len;
		int fd, n, status;
		ssize_t w;

		if (poll(&p, 1, 20) <= 0 || (fd = accept(f->lfd, NULL, NULL)) < 0)
			continue;
		if (tu_http_read_request(fd, head, sizeof(head), NULL, NULL) == 0) {
			sscanf(head, "%*s %2047s", target);
			pthread_mutex_lock(&f->mu);
			if (f->nheads < TU_FAKE_HEADS)
				f->heads[f->nheads++] = strdup(head);
			for (int i = 0; i < f->nrules && !r; i++)
				if (!strncmp(target, f->rule[i].path_prefix,
					     strlen(f->rule[i].path_prefix)) &&
				    (!f->rule[i].times || f->used[i] < f->rule[i].times)) {
					r = &f->rule[i];
					f->used[i]++;
				}
			/* The answer copied under the lock: a harness may change
			 * a rule's body between calls while one is being sent. */
			status = r ? r->status : 404;
			body = r && r->body ? strdup(r->body) : NULL;
			pthread_mutex_unlock(&f->mu);
			len = body ? strlen(body) : 0;
			n = snprintf(out, sizeof(out), "HTTP/1.1 %d Scripted\r\nContent-Type: "
				     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
				     status, len);
			w = write(fd, out, (size_t)n);
			/* The body whole, however large (a peer's answer may be). */
			for (size_t off = 0; w >= 0 && off < len; off += (size_t)w)
				if ((w = send(fd, body + off, len - off, MSG_NOSIGNAL)) < 0 &&
				    errno == EINTR)
					w = 0;
			free(body);
		}
		close(fd);
	}
	return NULL;
}

int tu_fake_start(struct tu_fake *f, const struct tu_fake_rule *rules, int n)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	memset(f, 0, sizeof(*f));
	if (n > TU_FAKE_RULES)
		return -1;
	memcpy(f->rule, rules, (size_t)n * sizeof(*rules));
	f->nrules = n;
	pthread_mutex_init(&f->mu, NULL);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(f->lfd, 16) < 0 ||
	    getsockname(f->lfd, (struct sockaddr *)&a, &al) < 0)
		return -1;
	f->port = ntohs(a.sin_port);
	return pthread_create(&f->th, NULL, serve, f) ? -1 : 0;
}

void tu_fake_stop(struct tu_fake *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->th, NULL);
	close(f->lfd);
	for (int i = 0; i < f->nheads; i++)
		free(f->heads[i]);
	pthread_mutex_destroy(&f->mu);
}

int tu_fake_saw(struct tu_fake *f, const char *needle)
{
	int seen = 0;

	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nheads && !seen; i++)
		seen = strstr(f->heads[i], needle) != NULL;
	pthread_mutex_unlock(&f->mu);
	return seen;
}

int tu_fake_count(struct tu_fake *f)
{
	int n;

	pthread_mutex_lock(&f->mu);
	n = f->nheads;
	pthread_mutex_unlock(&f->mu);
	return n;
}
