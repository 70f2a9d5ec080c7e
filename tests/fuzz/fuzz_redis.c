/*
 * libFuzzer: redis replies, any bytes a server sends, read as the backend
 * reads them: hiredis's reader with the functions that bound a reply's
 * elements and bytes (redis.c), through tsec__rd_reply, from a socket
 * whose other end wrote the input and closed.  Every reply is read or
 * refused and freed; nothing may crash, leak or hold more than the
 * bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker/storage/redis/redis_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisContext *c;
	redisReply *rep;
	int sv[2];
	size_t off = 0;

	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 0;
	while (off < size) {
		ssize_t w = write(sv[1], data + off, size - off);

		if (w <= 0)
			break;
		off += (size_t)w;
	}
	close(sv[1]);
	if (!(c = redisConnectFd(sv[0]))) {
		close(sv[0]);
		return 0;
	}
	if (!c->err && tsec__rd_cap(c))
		for (int i = 0; i < 1000 && tsec__rd_reply(c, &rep) == REDIS_OK; i++)
			freeReplyObject(rep);
	redisFree(c);                    /* closes sv[0] */
	return 0;
}
