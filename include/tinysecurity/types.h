/*
 * tinysecurity: request, decision and error types shared by the module ABI,
 * the bus and every host.  Fixed-width fields only; no pointer in a response
 * type, so a response never refers to memory the module owns.
 */
#ifndef TINYSECURITY_TYPES_H
#define TINYSECURITY_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Marks what leaves the shared library: everything else is built hidden
 * (-fvisibility=hidden), and tests/test_exports.c checks that the
 * library's dynamic symbols are exactly the TSEC_API declarations.
 */
#if defined(__GNUC__)
#define TSEC_API __attribute__((visibility("default")))
#else
#define TSEC_API
#endif

/*
 * Error codes: one list, append-only, never renumbered (the values travel
 * over the module ABI and the wire).  X(NAME, value, wire name, message)
 * generates the enum, the names the wire and the CLI use (tsec_errname)
 * and the messages (tsec_strerror), so the three can never disagree.
 */
#define TSEC_ERRNO_MAP(X) \
	X(OK,          0,   "ok",                 "success") \
	X(EINVAL,     -1,   "invalid_argument",   "invalid argument") \
	X(ENOMEM,     -2,   "out_of_memory",      "out of memory") \
	X(EIO,        -3,   "io",                 "input/output error") \
	X(ENOENT,     -4,   "not_found",          "not found") \
	X(ENOTSO,     -5,   "not_shared_object",  "not a loadable shared object") \
	X(ENOSYM,     -6,   "no_entry_symbol",    "module entry symbol missing") \
	X(EABI,       -7,   "abi_mismatch",       "module ABI major mismatch") \
	X(ESHORT,     -8,   "short_descriptor",   "module descriptor too short") \
	X(ENULLFN,    -9,   "null_function",      "module descriptor lacks a function") \
	X(EPOLICY,   -10,   "invalid_policy",     "invalid policy") \
	X(EDENIED,   -11,   "denied",             "denied by policy") \
	X(EEXIST,    -12,   "conflict",           "conflict: target exists") \
	X(EBUSY,     -13,   "busy",               "busy") \
	X(ETOOBIG,   -14,   "too_big",            "value too large") \
	X(EMODULE,   -15,   "module_failure",     "module failure") \
	X(EKEY,      -16,   "invalid_key",        "invalid key") \
	X(ETIMEDOUT, -17,   "timed_out",          "deadline passed") \
	X(EINCOMPLETE, -18, "incomplete",         "incomplete value") \
	X(ESIGNATURE, -19,  "bad_signature",      "bad or missing signature") \
	X(EPROTO,    -20,   "bad_request",        "malformed message") \
	X(EBUDGET,   -21,   "budget_exceeded",    "performance budget exceeded") \
	X(ENOTOWNER, -22,   "not_owner",          "lock held by another owner") \
	X(ECERT,     -23,   "bad_certificate",    "certificate does not parse") \
	X(EUNKNOWN,  -24,   "outcome_unknown",    "may or may not have been applied") \
	X(EAUTH,     -25,   "unauthenticated",    "the broker did not accept this client") \
	X(EUNREACHABLE, -26, "unreachable",       "no broker answered") \
	X(EROLLBACK, -27,   "rollback",           "revision not above the accepted one") \
	X(ECORRUPT,  -28,   "corrupt",            "stored data does not verify") \
	X(ECHANGED,  -29,   "changed",            "changed meanwhile by another writer") \
	X(ECANCELED, -30,   "cancelled",          "cancelled by the caller")

enum tsec_errno {
#define TSEC__ERRNO_ENUM(name, value, wire, msg) TSEC_##name = value,
	TSEC_ERRNO_MAP(TSEC__ERRNO_ENUM)
#undef TSEC__ERRNO_ENUM
};

/* Returns a static, human-readable message for a TSEC_E* code. */
TSEC_API const char *tsec_strerror(int code);

/*
 * Returns the code's short name ("denied", "not_found"), as the wire and
 * the CLI spell it; "unknown" for a code not in the map.
 */
TSEC_API const char *tsec_errname(int code);

/* Returns the code a name stands for, or TSEC_EPROTO for an unknown name. */
TSEC_API int tsec_errcode(const char *name);

#define TSEC_ERR_WHERE 128
#define TSEC_ERR_MSG 256

/*
 * Details of a failure, filled by the callee into caller-owned memory
 * (the idea of jansson's json_error_t).  `where` names the place: a JSON
 * pointer into a policy ("/rules/3/resource/0"), a request field
 * ("resource"), or a file.  Both strings are always NUL-terminated.
 */
struct tsec_error {
	int32_t code;
	char where[TSEC_ERR_WHERE];
	char msg[TSEC_ERR_MSG];
};

/*
 * Option structs with a future (tsec_store_opts, tsec_remote_opts,
 * tsec_client_opts), as the module ABI's structs have: each begins with
 * `size`, the sizeof the caller was built with, or 0 for the struct's
 * first size (its *_MIN_SIZE).  The library reads only what size covers,
 * so a program built against an older header keeps working when fields
 * are added; one built against a newer header is refused (TSEC_EINVAL)
 * only when it sets a field this library does not know (bytes past this
 * library's struct that are not zero).  TSEC_OPTS_HAS(o, MIN, field):
 * whether the caller's struct holds field.
 */
#define TSEC_OPTS_HAS(o, min, field) \
	(offsetof(__typeof__(*(o)), field) + sizeof((o)->field) <= \
	 ((o)->size ? (o)->size : (size_t)(min)))

/* A borrowed byte string; not necessarily NUL-terminated. */
struct tsec_str {
	const char *ptr;
	size_t len;
};

/*
 * What an action's request carries (tsec_action_flags): which context
 * fields it needs or may have, and how its resource is read.
 */
#define TSEC_AF_TTL        (1u << 0)  /* needs context.ttl_ms */
#define TSEC_AF_SIZE       (1u << 1)  /* needs context.size */
#define TSEC_AF_DEST       (1u << 2)  /* needs context.dest; both ends decided */
#define TSEC_AF_CERT       (1u << 3)  /* may carry context.cert_pem */
#define TSEC_AF_RECURSIVE  (1u << 4)  /* may carry context.recursive */
#define TSEC_AF_ROOT       (1u << 5)  /* its resource may be the root */

/*
 * Actions, listed once: X(NAME, "wire name", flags), in a fixed order
 * (the values are part of the ABI: new ones are appended).  The enum,
 * the names, the flags and the module's parser are made from this list.
 * cert.publish, cert.load, cert.exists and cert.archive are the remote
 * certificate store's (remote.h): a policy can let a principal publish a
 * certificate without letting it write the references' keys with
 * storage.store.  cert.obtain asks whether a server may obtain a
 * certificate for a name now (on-demand TLS); its resource is
 * "names/<name>", whose domain is the name, and a rule allowing it may
 * bound how many new names it allows ("when": {"rate": ...}), a bound
 * the broker counts (docs/ondemand.md).
 */
#define TSEC_ACTIONS(X) \
	X(STORAGE_STORE, "storage.store", TSEC_AF_SIZE | TSEC_AF_CERT) \
	X(STORAGE_LOAD, "storage.load", 0) \
	X(STORAGE_EXISTS, "storage.exists", 0) \
	X(STORAGE_DELETE, "storage.delete", TSEC_AF_RECURSIVE) \
	X(STORAGE_LIST, "storage.list", TSEC_AF_RECURSIVE | TSEC_AF_ROOT) \
	X(STORAGE_STAT, "storage.stat", 0) \
	X(STORAGE_MOVE, "storage.move", TSEC_AF_DEST) \
	X(LOCK_ACQUIRE, "lock.acquire", TSEC_AF_TTL) \
	X(LOCK_RENEW, "lock.renew", TSEC_AF_TTL) \
	X(LOCK_RELEASE, "lock.release", 0) \
	X(CERT_PUBLISH, "cert.publish", TSEC_AF_SIZE | TSEC_AF_CERT) \
	X(CERT_LOAD, "cert.load", 0) \
	X(CERT_EXISTS, "cert.exists", 0) \
	X(CERT_ARCHIVE, "cert.archive", TSEC_AF_DEST) \
	X(CERT_OBTAIN, "cert.obtain", 0)

/* The bounds of a cert.obtain rate ("when": {"rate": ...}). */
#define TSEC_RATE_MAX_NEW 100000
#define TSEC_RATE_MAX_WINDOW_S 31536000

enum tsec_action {
#define TSEC_X_ENUM(n, s, f) TSEC_ACTION_##n,
	TSEC_ACTIONS(TSEC_X_ENUM)
#undef TSEC_X_ENUM
	TSEC_ACTION__COUNT
};

/* Returns the wire name of an action ("storage.store"), or NULL. */
static inline const char *tsec_action_name(unsigned action)
{
	static const char *const names[TSEC_ACTION__COUNT] = {
#define TSEC_X_NAME(n, s, f) s,
		TSEC_ACTIONS(TSEC_X_NAME)
#undef TSEC_X_NAME
	};
	return action < TSEC_ACTION__COUNT ? names[action] : NULL;
}

/* Returns an action's TSEC_AF_* flags (0 for an unknown action). */
static inline unsigned tsec_action_flags(unsigned action)
{
	static const unsigned char flags[TSEC_ACTION__COUNT] = {
#define TSEC_X_FLAGS(n, s, f) (unsigned char)(f),
		TSEC_ACTIONS(TSEC_X_FLAGS)
#undef TSEC_X_FLAGS
	};
	return action < TSEC_ACTION__COUNT ? flags[action] : 0;
}

/* The actions a family pattern ("storage.*", "lock.*", "cert.*") names,
 * as a mask of 1 << action; 0 when s is not one. */
static inline unsigned tsec_action_family(const char *s, size_t n)
{
	unsigned m = 0;

	if (n < 3 || s[n - 1] != '*' || s[n - 2] != '.')
		return 0;
	for (unsigned a = 0; a < TSEC_ACTION__COUNT; a++) {
		const char *name = tsec_action_name(a);
		size_t i = 0;
		while (i < n - 1 && name[i] == s[i])
			i++;
		if (i == n - 1)
			m |= 1u << a;
	}
	return m;
}

/* Bits of tsec_context.has: which optional fields the request carries. */
#define TSEC_CTX_TTL_MS     (1u << 0)
#define TSEC_CTX_SIZE       (1u << 1)
#define TSEC_CTX_RECURSIVE  (1u << 2)
#define TSEC_CTX_DEST       (1u << 3)
#define TSEC_CTX_CERT_PEM   (1u << 4)
#define TSEC_CTX_NOW        (1u << 5)
#define TSEC_CTX__ALL       ((1u << 6) - 1)

/*
 * A rule's conditions ("when"), listed once, in a fixed order:
 * X(id, "name", carried, bound, lo).  carried: the TSEC_AF_* bit of the
 * actions whose requests carry what it reads (0: rate, which only an
 * allow of cert.obtain alone takes, a rule lint checks itself); bound:
 * the TSEC_CTX_* bit of an integer upper bound on that field (0: not
 * one), which `tsec diff` and `replay` probe at lo, at the bound and one
 * past it.  The module reads each with its when_<id> (module/rule.c), and
 * its bit in a rule is 1 << its place here; lint says one that none of
 * its rule's actions carries never applies; docs/HACKING.md says how to
 * add one.
 */
#define TSEC_CONDITIONS(X) \
	X(ttl_ms_max, "ttl_ms_max", TSEC_AF_TTL, TSEC_CTX_TTL_MS, 1) \
	X(size_max, "size_max", TSEC_AF_SIZE, TSEC_CTX_SIZE, 0) \
	X(recursive, "recursive", TSEC_AF_RECURSIVE, 0, 0) \
	X(cert, "cert", TSEC_AF_CERT, 0, 0) \
	X(rate, "rate", 0, 0, 0)

struct tsec_context {
	uint32_t has;            /* TSEC_CTX_* bits; unknown bits are invalid */
	uint32_t recursive;      /* 0 or 1, list and delete */
	uint64_t ttl_ms;         /* lease, lock.acquire and lock.renew */
	uint64_t size;           /* bytes, storage.store */
	int64_t now;             /* unix seconds, for tests; else the clock */
	struct tsec_str dest;    /* storage.move destination key */
	struct tsec_str cert_pem;/* certificate being stored */
};

/*
 * One question: may `principal` (with `roles`) do `action` on `resource`?
 * Everything is borrowed for the duration of the call.  Roles may be given
 * as "web" or "role:web".
 */
struct tsec_request {
	struct tsec_str principal;
	const struct tsec_str *roles;
	uint32_t nroles;
	struct tsec_str action;
	struct tsec_str resource;
	struct tsec_context ctx;
};

/*
 * Why a decision came out as it did.  0 means "no decision was made" and,
 * like every status but ALLOWED, denies: a zeroed decision is a deny.
 */
enum tsec_status {
	TSEC_STATUS_NONE = 0,    /* not decided (an error happened): deny */
	TSEC_STATUS_INVALID = 1, /* the request is malformed: deny */
	TSEC_STATUS_FLOOR = 2,   /* a floor rule matched: deny */
	TSEC_STATUS_DENIED = 3,  /* a deny rule matched: deny */
	TSEC_STATUS_ALLOWED = 4, /* an allow rule matched, nothing denied */
	TSEC_STATUS_DEFAULT = 5, /* no rule matched: deny */
};

/* Returns the reason phrase of a status ("forbidden by floor"). */
static inline const char *tsec_status_reason(unsigned status)
{
	switch (status) {
	case TSEC_STATUS_INVALID: return "invalid request";
	case TSEC_STATUS_FLOOR: return "forbidden by floor";
	case TSEC_STATUS_DENIED: return "forbidden by rule";
	case TSEC_STATUS_ALLOWED: return "allowed by rule";
	case TSEC_STATUS_DEFAULT: return "nothing allowed it";
	default: return "no decision (error)";
	}
}

#define TSEC_ID_MAX 64           /* rule id, NUL included */
#define TSEC_DECISION_RULES 4    /* deciding rule ids carried per decision */
#define TSEC_DETAIL_MAX 160

/* Bits of tsec_decision.flags. */
#define TSEC_DECISION_MORE_RULES (1u << 0) /* more rules decided than listed */
/* A condition failed to evaluate in a rule of the deciding effect, or
 * (TSEC_STATUS_DEFAULT) in an allow it kept from matching. */
#define TSEC_DECISION_COND_ERROR (1u << 1)

/*
 * The answer to one request.  `allow` is 1 only for TSEC_STATUS_ALLOWED.
 * `rules` lists the ids of the rules that decided (floor rules for FLOOR,
 * deny rules for DENIED, allow rules for ALLOWED), sorted by policy order.
 * `detail` is set for INVALID (naming the field) and on condition errors;
 * otherwise it is the empty string.
 */
struct tsec_decision {
	uint8_t allow;
	uint8_t status;
	uint8_t nrules;
	uint8_t flags;
	char rules[TSEC_DECISION_RULES][TSEC_ID_MAX];
	char field[32];
	char detail[TSEC_DETAIL_MAX];
};

/* Storage kinds derived from a key's layout. */
enum tsec_kind {
	TSEC_KIND_OTHER = 0,
	TSEC_KIND_CERT,
	TSEC_KIND_KEY,
	TSEC_KIND_META,
	TSEC_KIND_OCSP,
	TSEC_KIND_ACCOUNT,
	TSEC_KIND_LOCK,
	TSEC_KIND__COUNT
};

static inline const char *tsec_kind_name(unsigned kind)
{
	static const char *const names[TSEC_KIND__COUNT] = {
		"other", "cert", "key", "meta", "ocsp", "account", "lock",
	};
	return kind < TSEC_KIND__COUNT ? names[kind] : "other";
}

/* Limits of keys, enforced by the key rules. */
#define TSEC_KEY_MAX 1024        /* bytes */
#define TSEC_KEY_SEGMENTS 64     /* segments after normalisation */

/* Kinds of matched rules in a report. */
enum tsec_effect {
	TSEC_EFFECT_FLOOR = 1,
	TSEC_EFFECT_DENY = 2,
	TSEC_EFFECT_ALLOW = 3,
};

#define TSEC_REPORT_MATCHES 32
#define TSEC_REPORT_ERRORS 8

/*
 * The full diagnostic answer of Evaluate: the decision, the attributes the
 * module derived from the request, every rule that matched (up to
 * TSEC_REPORT_MATCHES; `nmatched_total` counts them all) and the errors met
 * while evaluating conditions.  Strings are NUL-terminated.
 */
struct tsec_report {
	struct tsec_decision decision;
	int32_t action;                  /* enum tsec_action, -1 if unknown */
	uint32_t kind;                   /* enum tsec_kind */
	char key[TSEC_KEY_MAX + 1];      /* normalised key */
	char issuer[256];
	char domain[256];                /* "*.example.com" for wildcard_ */
	uint32_t nmatched;
	uint32_t nmatched_total;
	struct {
		char id[TSEC_ID_MAX];
		uint32_t effect;         /* enum tsec_effect */
	} matched[TSEC_REPORT_MATCHES];
	uint32_t nerrors;
	struct {
		char rule[TSEC_ID_MAX];
		int32_t code;
		char msg[TSEC_DETAIL_MAX];
	} errors[TSEC_REPORT_ERRORS];
};

/*
 * Why-not (ABI 1.3, tsec_bus_explain): for each rule whose principal,
 * action and resource matched but which did not apply, the condition
 * that failed with the values compared ("size 100000 > size_max 65536");
 * and what the request's certificate says, as the policy saw it.
 */
#define TSEC_EXPLAIN_MAX 32

struct tsec_explain {
	uint32_t explained;              /* 0: the module has no explain (ABI
					    before 1.3); only the report is filled */
	uint32_t nnot_applied;           /* listed */
	uint32_t nnot_applied_total;     /* counted (each rule once per end) */
	struct {
		char rule[TSEC_ID_MAX];
		uint32_t effect;         /* enum tsec_effect */
		uint32_t dest;           /* 1: at a move's destination */
		char why[TSEC_DETAIL_MAX];
	} not_applied[TSEC_EXPLAIN_MAX];
	uint32_t has_cert;               /* the request carried cert_pem */
	char cert[512];                  /* "dns: a, b; not_after: ...; key: rsa 2048"
					    or why it did not parse */
};

#ifdef __cplusplus
}
#endif

#endif
