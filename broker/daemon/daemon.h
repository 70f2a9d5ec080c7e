/*
 * Internal: tsec-broker, the daemon.  One struct holds its state and is
 * passed to every part; each job lives in a file of its own, and the
 * map of docs/architecture.md names each one with its job (tests/
 * test_hacking.sh fails for a file it does not name: a second list here
 * drifted, 12 files of 18 by issue 53).
 */
#ifndef TSEC_DAEMON_H
#define TSEC_DAEMON_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/methods.h"
#include "common/prom.h"
#include "common/stats.h"

#include "tinysecurity/bus.h"
#include "tinysecurity/remote.h"
#include "tinysecurity/store.h"
#include "broker/daemon/declog.h"

#define TSEC_D_MAX_ENDPOINTS 8
#define TSEC_D_MAX_CALLERS 1024
#define TSEC_D_MAX_WORKERS 32
#define TSEC_D_MAX_ROLES 16
/* max_message's default: a 16 MiB value (TSEC_STORE_VALUE_MAX) and its call. */
#define TSEC_D_MAX_MESSAGE ((16u << 20) + (64u << 10))
#define TSEC_D_MAX_ASK 4                 /* "ask" listeners (ask.c) */
#define TSEC_D_MAX_BATCH 256
#define TSEC_D_MAX_HELD 65536            /* live locks the broker tracks, in all */
#define TSEC_D_LOCKS_PER_CALLER 4096     /* default share of the table, per caller */
#define TSEC_D_LOCK_WAIT_MAX_MS 30000
#define TSEC_D_MAX_PARKED 16384          /* lock waits the loop keeps, in all */
#define TSEC_D_MAX_QUEUED 4096           /* calls the loop holds for its workers */
#define TSEC_D_QUEUED_PER_CALLER 1024    /* of which one caller's */
#define TSEC_D_DRAIN_LINGER_MS 300
#define TSEC_D_FLEET_STALE_MS 30000      /* health: the fleet bundle unread this long */
#define TSEC_D_PROBE_MS 30000            /* the blob store asked this often */
#define TSEC_D_REPLY_MARGIN_MS 100       /* a caller's deadline, less this: the answer's way back */
#define TSEC_D_MAX_FRAMES 3              /* binary frames beside a call's JSON, each way */
#define TSEC_D_MAX_BATCH_CALLS 8         /* calls in one "batch" */

#define TSEC_D_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define TSEC_D_WORK_ENDPOINT "inproc://tsec-work"
#define TSEC_D_REPLY_ENDPOINT "inproc://tsec-replies"
#define TSEC_D_IPC_DOMAIN "tsec-ipc"
#define TSEC_D_TCP_DOMAIN "tsec-tcp"

/* One authenticated caller, as the configuration names it. */
struct tsec__caller {
	char principal[256];
	char *roles_buf;
	struct tsec_str roles[TSEC_D_MAX_ROLES];
	uint32_t nroles;
	int admin;
	uint8_t key[32];             /* CURVE public key (tcp callers) */
	long uid;                    /* peer uid (ipc callers), -1 if none */
	/* ,"principal":...,"roles":[...] for its decision-log lines (config.c) */
	char *log_who;
	size_t log_who_len;
};

/* "storage": a folder (the file backend) or an object naming a backend. */
struct tsec__storage_cfg {
	char *backend, *endpoints, *prefix, *key_file, *tls_ca, *tls_cert, *tls_key;
	char *username, *password_file;
	char *params;                /* "params" as the store takes it: a=1&b=2 */
	long long timeout_ms, request_max, cache_bytes, cache_live_ms;
	int watch_policy;            /* reload when the fleet's policy changes */
};

/* "remote": the remote certificate store; on 0: none. */
struct tsec__remote_cfg {
	int on;
	char *blobs, *key_file, *s3_endpoint, *s3_region, *s3_access_key, *s3_secret_file;
	char *s3_ca_file;
	int plain_keys, s3_virtual_host;
	long long blob_max, txn_max, timeout_ms;
};

struct tsec__config {
	char *module, *policy, *storage, *decision_log;
	char *metrics_listen;        /* "127.0.0.1:9464" or a port; NULL: none */
	struct sockaddr_in metrics_addr;  /* metrics_listen, read at load */
	struct tsec__storage_cfg st; /* st.backend NULL: storage is a folder */
	struct tsec__remote_cfg remote;
	char *state_dir;             /* the last accepted policy revision */
	char *fleet_id;              /* a signed policy must name this "fleet" */
	long log_gid;                /* decision log group, or -1 */
	long ipc_gid;                /* ipc sockets' group, or -1 (0600 then) */
	int allow_unsigned;          /* run on a policy nobody signed */
	int allow_caller_clock;      /* admin callers may send context.now */
	char *endpoints[TSEC_D_MAX_ENDPOINTS];
	int nendpoints;
	char server_secret[41];      /* Z85 */
	int have_secret;
	unsigned char policy_pk[32];
	int have_pk;
	int ipc_curve;               /* ipc callers use CURVE, not their uid */
	size_t max_message;
	int workers;
	int max_locks_per_caller;    /* live locks one caller may hold through us */
	size_t log_lines;
	struct tsec__caller callers[TSEC_D_MAX_CALLERS];
	int ncallers;
	/* "ask": Caddy's on-demand TLS endpoint, each listener asking as
	 * one caller (ask.c). */
	struct tsec__ask_cfg {
		char *listen;
		struct sockaddr_in addr;
		struct tsec__caller who;
	} asks[TSEC_D_MAX_ASK];
	int nasks;
};

/* ---- the method table ---- */

struct tsec__daemon;
struct tsec__call;

/*
 * A method's handler: fills *result (new JSON) and returns NULL, or
 * returns an error object (new JSON) for the reply.
 */
typedef json_t *(*tsec__method_fn)(struct tsec__daemon *d,
				   struct tsec__call *c, json_t **result);

struct tsec__method {
	const char *name;
	tsec__method_fn fn;
	unsigned flags;
};

/* The table (common/methods.h's list, in its order), and its length;
 * counters are indexed by the same position. */
extern const struct tsec__method tsec__methods[];
extern const size_t tsec__nmethods;
extern const struct tsec__method *const tsec__method_check;   /* "check" */

/* Returns the method named name[0..len), or NULL. */
const struct tsec__method *tsec__method_find(const char *name, size_t len);
/* The method a message names, from a quick look at it (NULL if none is
 * seen; the call is read properly when it runs). */
const struct tsec__method *tsec__method_of(const char *payload, size_t len);
/* "cancel": answered by the loop (callers.c), which holds the calls it
 * names; this handler only refuses it where the loop is not asked. */
json_t *tsec__m_cancel(struct tsec__daemon *d, struct tsec__call *c, json_t **result);
/* "cert.obtain" (obtain.c). */
json_t *tsec__m_cert_obtain(struct tsec__daemon *d, struct tsec__call *c, json_t **result);

/* ---- counters ---- */

/* One method's latency histogram (bounds in common/prom.h). */
struct tsec__hist {
	_Atomic uint64_t bucket[TSEC_LAT_BUCKETS + 1];   /* the last: over every bound */
	_Atomic uint64_t sum_ns;
};

struct tsec__stats {
#define TSEC_X_FIELD(f, name, help) _Atomic uint64_t f;
	TSEC_STAT_COUNTERS(TSEC_X_FIELD)      /* common/stats.h */
#undef TSEC_X_FIELD
	_Atomic uint64_t *by_method;  /* tsec__nmethods counters */
	struct tsec__hist *hist;     /* tsec__nmethods histograms */
};

/* ---- held locks ---- */

/* Which call a grant answered: its connection (hashed) and its id as
 * JSON text, so that a cancel of that call finds it. */
struct tsec__grant_of {
	uint64_t conn;
	uint8_t idlen;               /* 0: none */
	char id[40];                 /* TSEC__CALL_ID_MAX */
};

struct tsec__held {
	struct tsec_lock lk;
	int64_t until;               /* lease end on tsec__mono_ms: no wall step moves it */
	int caller;
	uint64_t conn;
	uint8_t idlen;
	char id[40];
};

struct tsec__held_table {
	pthread_mutex_t lock;
	size_t n, cap;               /* the entries in use: slot[0..n) */
	struct tsec__held *slot;     /* grown as needed, to TSEC_D_MAX_HELD */
	size_t *of;                  /* live entries per caller (the last: -1 and new) */
	size_t nslots;
};

/* The locks one call took (a lock.acquire, or a batch's acquires): the
 * loop lets them go when the call's caller has gone or cancelled it. */
#define TSEC__GRANTS_MAX 8               /* TSEC_D_MAX_BATCH_CALLS */
struct tsec__grants {
	unsigned n;
	struct tsec_lock lk[TSEC__GRANTS_MAX];
};

/*
 * What a worker knows of the call it runs beyond its message (NULL for a
 * call the loop runs): when it arrived, which call and connection it is
 * (a grant is recorded so), a parked lock wait's state each way, and the
 * locks it took.
 */
struct tsec__run {
	int64_t arrived_ns;          /* monotonic; 0: unknown (now) */
	struct tsec__grant_of of;
	const struct tsec_lock_wait *wait_in;    /* a parked wait's next attempt */
	struct tsec_lock_wait *wait_out;         /* where a wait parks; NULL: it may not */
	bool parked;
	struct tsec__grants grants;
};

/* ---- the daemon ---- */

/* Which policy serves: its revision (-1: none given) and SHA-256. */
struct tsec__policy_id {
	long long revision;
	char sha256[65];
	int64_t expires_s;           /* its "expires" (unix seconds), or 0 */
	int64_t loaded_ms;           /* when it started serving (wall) */
};

struct tsec__policy_text {
	struct tsec__policy_text *older;
	size_t len;
	char text[];
};

struct tsec__daemon {
	struct tsec__config cfg;
	/* fleet.c: the fleet's policy bundle, watched on a shared backend */
	pthread_t fleet_thread;
	pthread_mutex_t fleet_mu;
	pthread_cond_t fleet_cv;
	int fleet_on, fleet_started;
	char fleet_seen[65];         /* the bundle looked at last (reload_lock) */
	char fleet_raw[65];          /* SHA-256 of its bytes (the watch thread) */
	_Atomic int64_t fleet_read_ms;   /* the bundle last read (wall ms), 0 never */
	_Atomic int fleet_refused;       /* the bundle there now was refused */
	char fleet_me[33];           /* this broker's id: its record "seen-<id>" */
	char *fleet_bundle;          /* newest bundle taken here (reload_lock) */
	size_t fleet_bundle_len;
	unsigned fleet_polls;        /* the watch thread's */
	struct tsec__fleet_checked { /* other brokers' records, verified */
		char raw[65];
		long long revision;  /* -1: refused */
	} fleet_checked[16];
	_Atomic long long fleet_record_rev;  /* the fleet's bundle, verified; -1 none */
	_Atomic long long fleet_newest;      /* the newest revision seen verified */
	/* probe.c: the remote store's blob store, asked now and then */
	pthread_t probe_thread;
	pthread_mutex_t probe_mu;
	pthread_cond_t probe_cv;
	int probe_on, probe_started, probe_rc, probe_said;
	int64_t probe_ms;            /* when last asked (wall ms), 0 never */
	char probe_why[TSEC_ERR_MSG];
	void *metrics;               /* the metrics listener (libmicrohttpd), or NULL */
	void *ask[TSEC_D_MAX_ASK];   /* the ask listeners (ask.c) */
	struct psl_ctx_st *psl;      /* the public suffix list (obtain.c) */
	/* The running policy's cert.obtain rates (obtain.c; policy_lock). */
	struct tsec__obtain_limits *obtain_limits;
	/* The running policy as JSON, for near misses of a default deny
	 * (policy_lock; taken with a reference). */
	json_t *policy_json;
	struct tsec_bus *bus;
	/* The bus's "policy" endpoint, kept once found (methods.c). */
	_Atomic(struct tsec_endpoint *) policy_ep;
	struct tsec_store *store;
	struct tsec_remote *remote;  /* "remote" configured, or NULL */
	struct tsec__declog *log;
	void *zmq;                   /* the ZeroMQ context */
	struct tsec__stats st;
	pthread_mutex_t reload_lock;
	pthread_mutex_t policy_lock;     /* guards policy (health reads it) */
	struct tsec__policy_id policy;
	/*
	 * The running policy's members of a decision-log line,
	 * ,"policy_sha256":"...","policy_revision":N, made once per policy
	 * (policy.c) and read without the lock.  A line being written may
	 * hold the one before, so each stays until the broker stops
	 * (policy_texts: one per policy served, a few dozen bytes each).
	 */
	_Atomic(struct tsec__policy_text *) policy_text;
	struct tsec__policy_text *policy_texts;
	struct tsec__held_table held;
	int64_t started_ms;
	int sigpipe[2];
	const char *config_path;     /* --config, reread at each reload */
	char broker_id[17];          /* random, per process: names its decisions */
	_Atomic uint64_t decisions;  /* numbers them */
	atomic_long lock_waits;      /* lock.acquire calls parked by the loop */
	atomic_long calls_queued;    /* calls the loop holds for a free worker */
};

/*
 * A call's binary frames: the bytes of values that travel beside the
 * JSON, each a ZeroMQ frame of its own, never escaped or base64'd into
 * it (issue 36: jansson was 68% of a renewal turn's instructions, most
 * of it reading and writing certificates as JSON strings).  In: the
 * caller's, borrowed from its message.  Out: a reply's, each malloc'd,
 * given to ZeroMQ with the reply.
 */
struct tsec__frames {
	unsigned n;
	void *ptr[TSEC_D_MAX_FRAMES];
	size_t len[TSEC_D_MAX_FRAMES];
};

/* Frees out's buffers and empties it. */
void tsec__frames_free(struct tsec__frames *out);

/* One call in flight: who asks, and the message's id and params. */
struct tsec__call {
	const struct tsec__caller *who;
	int index;                   /* the caller's place in cfg.callers */
	struct tsec_principal p;     /* p.call_ctx points back at this call */
	json_t *id;
	json_t *params;
	char *id_text;               /* the id as JSON text, once made */
	size_t id_len;
	char id_small[24];           /* id_text for an integer or null id */
	char *result_text;           /* a method's result as JSON text, if it wrote one */
	size_t result_len;
	/* Frames: the caller's (NULL: none) and which of them a member
	 * "<name>_frame" named; whether the reply may carry values as
	 * frames (the message's "frames": true) and where they go. */
	const struct tsec__frames *in;
	unsigned in_used;
	bool batched;                /* one of a batch's calls (tsec__m_batch) */
	bool frames_out;
	struct tsec__frames *out;
	/* A worker's call: its arrival, its lock wait parked in the loop
	 * between attempts (no worker held while the lock is busy), and the
	 * locks it takes; NULL on the loop. */
	struct tsec__run *run;
	/* On the loop, answered only if the LocalCache holds the value
	 * (hit_only); when it does not, the method sets deferred and the
	 * call goes to a worker untouched. */
	bool hit_only, deferred;
	/* The first deny the store's own checks gave this call (the
	 * observer fills it): its reason and deciding rules go into the
	 * error reply as "reason" and "rules", so a caller can tell which
	 * rule refused it without parsing the message. */
	struct {
		bool set;
		uint8_t status, nrules;
		char rules[TSEC_DECISION_RULES][TSEC_ID_MAX + 1];
	} deny;
};

/* Blocks SIGHUP, SIGTERM and SIGINT in the calling thread: a worker or
 * the ZAP thread, so that a signal meant for the loop never interrupts
 * their waits (the loop thread takes them). */
void tsec__block_signals(void);

/* Writes "tsec-broker: " and the message, escaped, to tsec__say_fd
 * (stderr; the fuzzing harnesses point it elsewhere). */
void tsec__say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int tsec__say_fd;

/* config.c: reads path into *c (zeroed first).  0, or the error with
 * "config ...: why" in *err; nothing is printed (the caller says it). */
int tsec__config_load(const char *path, struct tsec__config *c, struct tsec_error *err);
void tsec__config_free(struct tsec__config *c);
/* Prints every setting, one "section/name kind" line each (--settings). */
void tsec__config_settings(FILE *f);
/* metrics.c: the optional Prometheus listener */
int tsec__metrics_start(struct tsec__daemon *d, struct tsec_error *err);
void tsec__metrics_stop(struct tsec__daemon *d);
/* ask.c: the "ask" listeners, Caddy's on-demand TLS question. */
int tsec__ask_start(struct tsec__daemon *d, struct tsec_error *err);
void tsec__ask_stop(struct tsec__daemon *d);
int tsec__cfg_asks(json_t *root, struct tsec__config *c, struct tsec_error *err);
void tsec__asks_free(struct tsec__config *c);
int tsec__asks_differ(const struct tsec__config *a, const struct tsec__config *b);
/* Check's work once its requests are read (methods.c): decide, log,
 * write the result as text into c; NULL or the error. */
json_t *tsec__check_requests(struct tsec__daemon *d, struct tsec__call *c,
			     struct tsec_request *r, size_t n);
/* The same, the result appended to w (the reply being written). */
struct tsec__jw;
json_t *tsec__check_requests_into(struct tsec__daemon *d, struct tsec__call *c,
				  struct tsec_request *r, size_t n, struct tsec__jw *w);
/* The health answer (methods.c): status "ok" or "degraded" with why. */
json_t *tsec__health_json(struct tsec__daemon *d);
/* The stats reply (methods.c), for the listener. */
json_t *tsec__stats_json(struct tsec__daemon *d);

/* fleet.c */
int tsec__fleet_shared(const struct tsec__daemon *d);
int tsec__fleet_start(struct tsec__daemon *d, struct tsec_error *err);
/* At start: replaces *text by the fleet's policy when that verifies and
 * has a higher revision (a broker that was away catches up).  Returns 0. */
int tsec__fleet_prefer(struct tsec__daemon *d, char **text, size_t *len);
long long tsec__policy_revision_of(const char *text, size_t len);
/*
 * Reads a fleet bundle (or a broker's seen record) b[0..len):
 * {"policy": TEXT, "signature": HEX}; *text (new, NUL-terminated,
 * *tlen bytes) once the signature verifies with pk.  pk NULL: refused,
 * the broker has no key to trust a bundle by.
 */
int tsec__fleet_bundle_open(const unsigned char *pk, const char *b, size_t len, char **text,
			    size_t *tlen, struct tsec_error *err);
void tsec__fleet_stop(struct tsec__daemon *d);

/* probe.c: asks the remote store's blob store at start and every
 * TSEC_D_PROBE_MS (nothing without a remote store); its state for
 * health, appending why to degraded when it fails. */
int tsec__probe_start(struct tsec__daemon *d, struct tsec_error *err);
void tsec__probe_stop(struct tsec__daemon *d);
json_t *tsec__probe_json(struct tsec__daemon *d, json_t *degraded);
struct tsec__policy_id;
int tsec__fleet_publish(struct tsec__daemon *d, const char *policy, size_t plen,
			const char *sig_hex, struct tsec__policy_id *id, struct tsec_error *err);

/* The store options the configuration names (borrowing its strings). */
void tsec__store_opts_of(const struct tsec__config *c, struct tsec_store_opts *o);
/* config.c's parts: a member of o not a setting of section is refused
 * (place is o's JSON pointer); the callers (config_callers.c); the files
 * and folders named, checked as written (config_paths.c).  0, or the
 * error (TSEC_EINVAL, TSEC_ENOMEM, or what opening a path said) with
 * "config PLACE: why" in *err: nothing here prints. */
int tsec__cfg_known_only(json_t *o, const char *place, const char *section,
			 struct tsec_error *err);
int tsec__cfg_callers(json_t *root, struct tsec__config *c, struct tsec_error *err);
/* One caller's principal, roles and admin flag from x: 0, or TSEC_EINVAL
 * (TSEC_ENOMEM) with nothing said: the caller names the place. */
int tsec__cfg_caller(json_t *x, struct tsec__caller *cl);
/* [IPv4 ADDRESS:]PORT (loopback when no address) into *out; TSEC_EINVAL
 * naming place in *err. */
int tsec__cfg_listen(const char *l, struct sockaddr_in *out, const char *place,
		     struct tsec_error *err);
int tsec__cfg_paths(const struct tsec__config *c, struct tsec_error *err);

/* The remote store's options from "remote" (strings borrowed from c). */
void tsec__remote_opts_of(const struct tsec__config *c, struct tsec_remote_opts *o);
/*
 * At a reload: rereads the configuration file and says which settings
 * changed; only the policy's text is applied live, the rest takes effect
 * at the next start (the listening sockets, callers and threads are the
 * running process's).  A file that no longer loads is said and ignored.
 */
void tsec__config_reread(const char *path, const struct tsec__config *running);

/* policy.c: the policy text, signature checked when the config names a key. */
int tsec__policy_text(struct tsec__daemon *d, char **text, size_t *len,
		      struct tsec_error *err);
/* Recompiles the policy; on failure the old one keeps serving. */
int tsec__policy_reload(struct tsec__daemon *d, struct tsec_error *err);
/* The module's error e about the policy text, worded "POLICY:LINE:COL:
 * /pointer: message" in e->msg (common/where.h); other errors as they are. */
void tsec__policy_locate(const struct tsec__daemon *d, const char *text, size_t len,
			 struct tsec_error *e);
/* Identifies a policy's text and refuses a rollback (signed policies). */
int tsec__policy_admit(struct tsec__daemon *d, const char *text, size_t len,
		       struct tsec__policy_id *id, struct tsec_error *err);
/* Whether a signed policy is for this broker's fleet and not expired. */
int tsec__policy_bound(struct tsec__daemon *d, const char *text, size_t len,
		       struct tsec_error *err);
/* Records the policy as serving, and its revision across restarts. */
int tsec__policy_commit(struct tsec__daemon *d, const struct tsec__policy_id *id,
			const char *text, size_t len, struct tsec_error *err);

/* auth.c: binds the ZAP handler and starts its thread. */
int tsec__auth_start(struct tsec__daemon *d, pthread_t *thread);

/* methods.c: the store's observer (one log line per store decision). */
void tsec__observe(void *ctx, void *call_ctx, const struct tsec_request *reqs,
		   const struct tsec_decision *dec, size_t n,
		   uint64_t latency_ns);
/* One decision-log line. */
/* Why nothing allowed a request: up to TSEC__WHY_NOT_MAX rules that
 * matched it and the condition each failed (methods.c). */
#define TSEC__WHY_NOT_MAX 4
struct tsec__why_not_one {
	char rule[TSEC_ID_MAX];
	char why[TSEC_DETAIL_MAX];
	int dest;                    /* at a move's destination */
};
struct tsec__why_not {
	unsigned n;
	struct tsec__why_not_one v[TSEC__WHY_NOT_MAX];
};
/* Fills out for a default deny (n = 0 otherwise, or without explain). */
void tsec__why_not_of(struct tsec__daemon *d, const struct tsec_request *r,
		      const struct tsec_decision *dec, struct tsec__why_not *out);
/* Writes y as a JSON array, each why cut to max bytes. */
struct tsec__jw;
void tsec__why_not_write(struct tsec__jw *w, const struct tsec__why_not *y, size_t max);
void tsec__log_decision(struct tsec__daemon *d, struct tsec__call *c,
			const struct tsec_str *action, const struct tsec_str *resource,
			const struct tsec_context *ctx, const struct tsec_decision *dec,
			const struct tsec__why_not *why, int64_t latency_ns);
/* The call's id as JSON text ("null" when it has none), made once. */
const char *tsec__call_id(struct tsec__call *c, size_t *n);

/* storage.c: the store.* and lock.* handlers the method table names. */
json_t *tsec__m_store_put(struct tsec__daemon *, struct tsec__call *, json_t **);
/* dispatch.c: several storage calls in one message. */
json_t *tsec__m_batch(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_put_many(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_get(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_save_cert(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_load_cert(struct tsec__daemon *, struct tsec__call *, json_t **);
/* The remote certificate store's methods (storage.c). */
json_t *tsec__m_remote_publish(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_remote_load(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_remote_exists(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_remote_archive_key(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_remote_load_archived(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_remote_sweep(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_remote_recover(struct tsec__daemon *d, struct tsec__call *c, json_t **result);
/* storage.c's answers: rc's error, or *result (an empty object when
 * unset); and "no remote store" for the remote methods. */
json_t *tsec__m_done(int rc, const struct tsec_error *err, json_t **result);
json_t *tsec__m_no_remote(void);
json_t *tsec__m_store_exists(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_delete(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_list(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_stat(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_store_move(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_lock_acquire(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_lock_renew(struct tsec__daemon *, struct tsec__call *, json_t **);
json_t *tsec__m_lock_release(struct tsec__daemon *, struct tsec__call *, json_t **);
/* Lets go a lock granted to caller's call after the caller had gone or
 * cancelled it (a worker's job: the backend is asked). */
void tsec__let_go(struct tsec__daemon *d, int caller, const struct tsec_lock *lk);

/* held.c: the locks taken through the broker (see there). */
int tsec__held_init(struct tsec__held_table *h, int ncallers);
void tsec__held_free(struct tsec__held_table *h);
/*
 * Records a lock: TSEC__HELD_OK, TSEC__HELD_FULL when every slot holds
 * a live lease, TSEC__HELD_QUOTA when the caller already holds `quota`
 * live ones (not TSEC_E* codes: the caller words the refusal).  of: the
 * call it answers, or NULL.
 */
enum { TSEC__HELD_OK = 0, TSEC__HELD_FULL = 1, TSEC__HELD_QUOTA = 2 };
int tsec__held_put(struct tsec__held_table *h, const struct tsec_lock *lk,
		   int caller, int quota, const struct tsec__grant_of *of);
/* Live locks recorded for one caller (pruned once it has `quota`). */
int tsec__held_of(struct tsec__held_table *h, int caller, int quota);
/* A renewed lease's new end; a lock not recorded (taken elsewhere, or
 * before a restart) is recorded for caller. */
void tsec__held_touch(struct tsec__held_table *h, const struct tsec_lock *lk, int caller);
void tsec__held_drop(struct tsec__held_table *h, const struct tsec_lock *lk);
/* Takes out caller's grant for the call `of` names: true with it in *out. */
bool tsec__held_take(struct tsec__held_table *h, int caller, const struct tsec__grant_of *of,
		     struct tsec_lock *out);
/* Live locks recorded. */
size_t tsec__held_count(struct tsec__held_table *h);

/* dispatch.c: runs one call; returns the reply text (new). */
char *tsec__dispatch(struct tsec__daemon *d, int caller, const char *payload,
		     size_t len);
/* The same, read by jansson whatever its shape (tsec__dispatch tries
 * tsec__dispatch_fast first; the wire fuzzer compares the two). */
char *tsec__dispatch_tree(struct tsec__daemon *d, int caller, const char *payload,
			  size_t len);
/*
 * A worker's dispatch: tsec__dispatch_tree, with what the loop says of
 * the call (run, or NULL): a lock.acquire that finds the lock held, with
 * time left to wait, parks instead of waiting when run->wait_out is set:
 * NULL, run->parked set and its wait in *run->wait_out, for the loop to
 * step again after its pause_ms.  run->wait_in: the wait of a parked
 * call's next attempt (not counted as a new call).  in: the frames that
 * came with the call (NULL or empty: none); out: where the reply's frames
 * go (emptied first; on NULL a call asking for frames gets its values as
 * JSON).
 */
char *tsec__dispatch_step(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			  const struct tsec__frames *in, struct tsec__run *run,
			  struct tsec__frames *out);
/* json_dumps, with DEL escaped as the tree-less writer escapes it. */
char *tsec__json_text(const json_t *j, size_t flags);
/* A reply with a null id and an error (new text). */
char *tsec__error_reply(int code, const char *msg);
/* The same with the id of the call in payload, when it has one. */
char *tsec__error_reply_to(const char *payload, size_t len, int code, const char *msg);
/* Whether the payload names a method marked TSEC_M_INLINE. */
int tsec__is_inline(const char *payload, size_t len);
/*
 * The loop's look at a store.get or store.exists (tsec__is_cache_read
 * says whether the payload names one): answered from the LocalCache when it holds the
 * value, the policy asked and the decision logged as a worker would
 * (the reply, new); NULL when it does not, with nothing counted,
 * checked or logged, for a worker to run the call.  No worker hand-off
 * for a hit: two thread wake-ups fewer (issue 36).
 */
char *tsec__dispatch_hit(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			 struct tsec__frames *out);
int tsec__is_cache_read(const char *payload, size_t len);
/*
 * A Check in the common shape (common/wire_fast.c), answered whole: the
 * reply written into w (emptied first, its buffer kept from call to
 * call); 1.  0, with w untouched, when the message is not one or the
 * caller is not known: tsec__dispatch reads it then.  Such a Check
 * carries no certificate, so it is always quick enough to run inline.
 */
int tsec__dispatch_fast(struct tsec__daemon *d, int caller, const char *payload, size_t len,
			struct tsec__jw *w);
/* Helpers for handlers. */
json_t *tsec__fail(int code, const char *where, const char *msg);
json_t *tsec__err_json(const struct tsec_error *e);
const char *tsec__param_str(const struct tsec__call *c, const char *k);
/*
 * A value of o: its member `name` as a string, or `name`_frame naming one
 * of the call's frames (from 1; each frame named once).  *v borrows from
 * o or the frame.  NULL, or the error (where: its place, for the reply).
 */
json_t *tsec__value_in(struct tsec__call *c, const json_t *o, const char *name,
		       const char *where, const char **v, size_t *n);
/* NULL when every frame the call came with was named, else the error:
 * a stray frame is a caller's mistake, refused before anything is done. */
json_t *tsec__frames_all_named(const struct tsec__call *c);
/*
 * Puts a value into the result object r as `name`: a frame of the reply
 * when the caller asked for frames (v, malloc'd, is then the frame's:
 * *v is set to NULL), else JSON text (or `name`_b64 when v is not UTF-8
 * or holds a NUL).  0, or -1 without memory.
 */
int tsec__value_out(struct tsec__call *c, json_t *r, const char *name, char **v, size_t n);

/* ipc.c: 1 when a live listener answers at the ipc path, 0 when the
 * path is free (a stale socket file is removed), -1 when it is unusable. */
int tsec__ipc_in_use(const char *path);
/* ipc.c: binds ZeroMQ socket s to ep ("ipc://path"): the socket's
 * folder made 0700 or checked (nobody else may change it), the path
 * claimed by a flock on "path.lock" (*claim, held for the broker's
 * life), refused where a live broker answers; the socket file 0600.
 * With gid >= 0 (ipc_group) a folder it makes is 0710 and the socket
 * 0660, both that group's.  0, or -1 and errno. */
int tsec__bind_ipc(void *s, const char *ep, long gid, int *claim);
/* tsec__bind_ipc's refusal whose reason it has said (not the OS's errno). */
#define TSEC__BIND_SAID (-2)
/* --check: the folder an ipc endpoint's socket goes in, checked as the
 * start checks it (0, or -1 with why said). */
int tsec__ipc_check(const char *ep);
/* check.c: --check's endpoints, listeners and ipc callers; 1 when one
 * would fail the start (said), else 0. */
int tsec__check_endpoints(struct tsec__daemon *d);
/*
 * --check: says what was checked, one line each, and returns 2 for
 * anything it could not check (else 0).  Everything the start did is
 * checked already (configuration, module, policy and its signature and
 * revision, storage, log); this adds the storage's reach, state_dir, the
 * endpoints, listeners and callers, as the start would find them.
 */
int tsec__check_report(struct tsec__daemon *d, const char *config);

/* serve.c: binds, serves until SIGTERM, stops the workers.  0 or -1. */
int tsec__serve(struct tsec__daemon *d);

#endif
