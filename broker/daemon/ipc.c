/*
 * tsec-broker's ipc endpoints: one broker per socket path (a live
 * listener found, a stale socket file removed), the folder the socket
 * goes in checked as the store's root is, and the bind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.h>

#include "broker/daemon/daemon.h"

/*
 * One broker per endpoint: whether a live listener answers at path (the
 * socket file of another broker).  1 live, 0 free or stale (a stale file
 * is removed), -1 something else stands there (with errno-style message
 * said).
 */
int tsec__ipc_in_use(const char *path)
{
	struct sockaddr_un sa;
	struct stat sb;
	int fd, rc;

	if (lstat(path, &sb) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(sb.st_mode)) {
		tsec__say("%s exists and is not a socket; refusing to replace it", path);
		return -1;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path));
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (rc == 0)
		return 1;
	if (errno == ECONNREFUSED) {
		/* Nobody listens: a dead broker's file; it may go. */
		unlink(path);
		return 0;
	}
	return -1;
}

/*
 * Whether an existing folder may hold the broker's socket: the broker's
 * own (or root's) and writable by nobody else.  In a folder others may
 * write (a shared 1777 one), another user could take the socket's name
 * first, or plant a socket of their own there for callers to reach.
 * 0, or -1 with why said.
 */
static int socket_folder_ok(const char *folder)
{
	struct stat sb;

	if (stat(folder, &sb) < 0) {
		tsec__say("the socket's folder %s: %s", folder, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(sb.st_mode)) {
		tsec__say("the socket's folder %s is not a folder", folder);
		return -1;
	}
	if (sb.st_uid != geteuid() && sb.st_uid != 0) {
		tsec__say("the socket's folder %s is owned by uid %ld, not this broker's (%ld) "
			  "nor root: refusing to put its socket there; give it a folder of its "
			  "own (e.g. /run/tinysecurity)", folder, (long)sb.st_uid, (long)geteuid());
		return -1;
	}
	if (sb.st_mode & 022) {
		tsec__say("the socket's folder %s is mode %04o: others can write it (and take "
			  "the socket's name, or plant a socket callers would reach): refusing; "
			  "give the broker a folder of its own (e.g. /run/tinysecurity)", folder,
			  (unsigned)(sb.st_mode & 07777));
		return -1;
	}
	return 0;
}

/*
 * With ipc_group, whether the group can reach the socket in folder:
 * members must be able to search it.  Said, not refused: an operator
 * may mean to widen the folder later; until then they cannot connect.
 */
static void group_reaches(const char *folder, long gid)
{
	struct stat sb;

	if (gid < 0 || stat(folder, &sb) < 0)
		return;
	if (!(sb.st_mode & 001) && !((sb.st_mode & 010) && (long)sb.st_gid == gid))
		tsec__say("ipc_group: the socket's folder %s (mode %04o, group %ld) cannot be "
			  "searched by group %ld: its members cannot connect until it can "
			  "(e.g. RuntimeDirectoryMode=0710 with that group)", folder,
			  (unsigned)(sb.st_mode & 07777), (long)sb.st_gid, gid);
}

int tsec__ipc_check(const char *ep)
{
	char path[1024], *slash;
	struct stat sb;

	snprintf(path, sizeof(path), "%s", ep + 6);
	if (!(slash = strrchr(path, '/')))
		snprintf(path, sizeof(path), ".");
	else if (slash == path)
		snprintf(path, sizeof(path), "/");
	else
		*slash = '\0';
	if (stat(path, &sb) == 0)
		return socket_folder_ok(path);
	/* The start makes it, 0700, in a folder it must be able to write. */
	slash = strrchr(path, '/');
	if (slash)
		*slash = '\0';
	if (access(slash ? (*path ? path : "/") : ".", W_OK) != 0) {
		tsec__say("the socket's folder %s/%s does not exist and cannot be made: %s",
			  slash ? path : ".", slash ? slash + 1 : path, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Binds an ipc endpoint with its socket file 0600 (0660 and owned by
 * group gid when gid >= 0: ipc_group), refusing one where a live broker
 * answers.  A folder it makes is 0700 (0710 and owned by gid); an
 * existing one is never changed (a shared folder would lose its mode for
 * good), only checked (socket_folder_ok).
 */
/*
 * The socket's folder (path, or "." when the endpoint names none): made
 * 0700 (0710 and the group's with ipc_group) when absent, else checked
 * as nobody else's to write.  0, or TSEC__BIND_SAID with why said.
 */
static int prepare_folder(char *path, bool named, long gid)
{
	const char *folder = !named ? "." : *path ? path : "/";
	bool made = false;

	if (named && *path) {
		if (mkdir(path, 0700) == 0)
			made = true;
		else if (errno != EEXIST) {
			tsec__say("cannot make the socket's folder %s: %s", path, strerror(errno));
			return TSEC__BIND_SAID;
		}
	}
	if (made) {
		/* Ours: 0700 whatever the umask left; searchable by the group
		 * with ipc_group. */
		if (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0) {
			tsec__say("ipc_group: cannot give %s to group %ld: %s", path, gid,
				  strerror(errno));
			return TSEC__BIND_SAID;
		}
		chmod(path, gid >= 0 ? 0710 : 0700);
	} else if (socket_folder_ok(folder)) {
		return TSEC__BIND_SAID;  /* why, said: not the OS's EACCES */
	}
	group_reaches(folder, gid);
	return 0;
}

/*
 * Claimed first, for the broker's life: a flock on "<socket>.lock".
 * Looking for a listener, then binding, is not enough alone: two brokers
 * starting at once both find the path free, and ZeroMQ's bind removes
 * the socket file it finds, so the second took the first's clients.  The
 * kernel lets it go however the broker ends.  The lock's descriptor, or
 * TSEC__BIND_SAID (another broker's, said) or -1 (errno).
 */
static int claim_path(const char *path, const char *ep)
{
	char lockp[1030];
	int lfd, rc;

	snprintf(lockp, sizeof(lockp), "%s.lock", path);  /* fits: path is under 1024 */
	if ((lfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return -1;
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? TSEC__BIND_SAID : -1;
		if (rc == TSEC__BIND_SAID)
			tsec__say("another broker holds %s; refusing to take its socket", lockp);
		close(lfd);
		errno = EADDRINUSE;
		return rc;
	}
	if ((rc = tsec__ipc_in_use(path)) != 0) {
		if (rc > 0)
			tsec__say("another broker is listening at %s; refusing to take its socket", ep);
		close(lfd);
		errno = EADDRINUSE;
		return rc > 0 ? TSEC__BIND_SAID : -1;
	}
	return lfd;
}

int tsec__bind_ipc(void *s, const char *ep, long gid, int *claim)
{
	char path[1024], *slash;
	mode_t old;
	int rc, lfd;

	snprintf(path, sizeof(path), "%s", ep + 6);
	slash = strrchr(path, '/');
	if (slash)
		*slash = '\0';
	if ((rc = prepare_folder(path, slash != NULL, gid)))
		return rc;
	if (slash)
		*slash = '/';
	if ((lfd = claim_path(path, ep)) < 0)
		return lfd;
	old = umask(077);
	rc = zmq_bind(s, ep);
	umask(old);
	if (rc == 0 && gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0) {
		tsec__say("ipc_group: cannot give %s to group %ld: %s", path, gid, strerror(errno));
		zmq_unbind(s, ep);
		rc = TSEC__BIND_SAID;
	}
	if (rc == 0) {
		/* The group's only once it owns the file; held until the loop
		 * ends (*claim). */
		chmod(path, gid >= 0 ? 0660 : 0600);
		*claim = lfd;
	} else {
		close(lfd);
	}
	return rc;
}
