/*
 * The broker's methods: the one list (issue 53, item 1).  The daemon's
 * table (broker/daemon/methods.c), the client's choice of what it may
 * send again after a failover (broker/client/client.c), `tsec-broker
 * --methods` and the test of tsec-broker(8) all expand this list, so a
 * method is added in one place (docs/HACKING.md, "Adding a method").
 *
 * X(ID, NAME, HANDLER, FLAGS): ID names the enum constant TSEC__M_ID;
 * HANDLER is the daemon's function (a token only the daemon expands);
 * FLAGS are the TSEC_M_* below.  The order is the counters' order in
 * stats; append, never reorder.
 */
#ifndef TSEC_COMMON_METHODS_H
#define TSEC_COMMON_METHODS_H

#include <string.h>

#define TSEC_M_INLINE  (1u << 0) /* microseconds of work: run in the loop */
#define TSEC_M_ADMIN   (1u << 1) /* admin callers only */
#define TSEC_M_STORAGE (1u << 2) /* needs a worker: touches the store (disk, lock waits) */
#define TSEC_M_FRAMES  (1u << 3) /* takes values as binary frames ("<name>_frame") */
#define TSEC_M_READ    (1u << 4) /* changes nothing: may be sent again */
#define TSEC_M_RESEND  (1u << 5) /* changes something, the same however often sent */

#define TSEC__METHOD_LIST(X) \
	X(EVALUATE,      "evaluate",             m_evaluate,                   TSEC_M_INLINE | TSEC_M_READ) \
	X(CHECK,         "check",                m_check,                      TSEC_M_INLINE | TSEC_M_READ) \
	X(HEALTH,        "health",               m_health,                     TSEC_M_INLINE | TSEC_M_READ) \
	X(STATS,         "stats",                m_stats,                      TSEC_M_INLINE | TSEC_M_READ) \
	X(RELOAD,        "reload",               m_reload,                     TSEC_M_ADMIN) \
	X(PUBLISH,       "policy.publish",       m_publish,                    TSEC_M_ADMIN | TSEC_M_STORAGE) \
	X(PUT,           "store.put",            tsec__m_store_put,            TSEC_M_STORAGE | TSEC_M_FRAMES) \
	X(PUT_MANY,      "store.put_many",       tsec__m_store_put_many,       TSEC_M_STORAGE | TSEC_M_FRAMES) \
	X(GET,           "store.get",            tsec__m_store_get,            TSEC_M_STORAGE | TSEC_M_READ) \
	X(EXISTS,        "store.exists",         tsec__m_store_exists,         TSEC_M_STORAGE | TSEC_M_READ) \
	X(DELETE,        "store.delete",         tsec__m_store_delete,         TSEC_M_STORAGE) \
	X(LIST,          "store.list",           tsec__m_store_list,           TSEC_M_STORAGE | TSEC_M_READ) \
	X(STAT,          "store.stat",           tsec__m_store_stat,           TSEC_M_STORAGE | TSEC_M_READ) \
	X(MOVE,          "store.move",           tsec__m_store_move,           TSEC_M_STORAGE) \
	X(SAVE_CERT,     "store.save_cert",      tsec__m_store_save_cert,      TSEC_M_STORAGE | TSEC_M_FRAMES) \
	X(LOAD_CERT,     "store.load_cert",      tsec__m_store_load_cert,      TSEC_M_STORAGE | TSEC_M_READ) \
	X(R_PUBLISH,     "remote.publish",       tsec__m_remote_publish,       TSEC_M_STORAGE | TSEC_M_FRAMES) \
	X(R_LOAD,        "remote.load",          tsec__m_remote_load,          TSEC_M_STORAGE | TSEC_M_READ) \
	X(R_EXISTS,      "remote.exists",        tsec__m_remote_exists,        TSEC_M_STORAGE | TSEC_M_READ) \
	X(R_ARCHIVE_KEY, "remote.archive_key",   tsec__m_remote_archive_key,   TSEC_M_STORAGE) \
	X(R_LOAD_ARCH,   "remote.load_archived", tsec__m_remote_load_archived, TSEC_M_STORAGE | TSEC_M_READ) \
	X(R_SWEEP,       "remote.sweep",         tsec__m_remote_sweep,         TSEC_M_ADMIN | TSEC_M_STORAGE) \
	X(R_RECOVER,     "remote.recover",       tsec__m_remote_recover,       TSEC_M_ADMIN | TSEC_M_STORAGE) \
	X(ACQUIRE,       "lock.acquire",         tsec__m_lock_acquire,         TSEC_M_STORAGE) \
	X(RENEW,         "lock.renew",           tsec__m_lock_renew,           TSEC_M_STORAGE | TSEC_M_RESEND) \
	X(RELEASE,       "lock.release",         tsec__m_lock_release,         TSEC_M_STORAGE) \
	X(BATCH,         "batch",                tsec__m_batch,                TSEC_M_STORAGE | TSEC_M_FRAMES) \
	X(CANCEL,        "cancel",               tsec__m_cancel,               TSEC_M_INLINE) \
	/* Counted twice, a name is new once: the second finds it. */ \
	X(OBTAIN,        "cert.obtain",          tsec__m_cert_obtain,          TSEC_M_STORAGE | TSEC_M_RESEND)

enum tsec__method_id {
#define TSEC__M_ENUM(id, name, fn, flags) TSEC__M_##id,
	TSEC__METHOD_LIST(TSEC__M_ENUM)
#undef TSEC__M_ENUM
	TSEC__M_COUNT
};

/* A method's flags by name (0 for no such method). */
static inline unsigned tsec__method_flags(const char *name)
{
	static const struct { const char *name; unsigned flags; } all[] = {
#define TSEC__M_FLAGS(id, n, fn, fl) { n, fl },
		TSEC__METHOD_LIST(TSEC__M_FLAGS)
#undef TSEC__M_FLAGS
	};

	for (unsigned i = 0; name && i < TSEC__M_COUNT; i++)
		if (!strcmp(all[i].name, name))
			return all[i].flags;
	return 0;
}

#endif
