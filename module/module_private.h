/*
 * Internal interfaces of the policy module: key parsing, pattern matching,
 * the compiled policy and its evaluation.  Nothing here is exported from
 * the shared object.
 */
#ifndef TSEC_MODULE_PRIVATE_H
#define TSEC_MODULE_PRIVATE_H

#include <stdbool.h>
#include <string.h>

#include "tinysecurity/module.h"
#include "common/error.h"
#include "common/key.h"

/* ---- patterns (module/match.c) ---- */

/* Glob match of one segment: '*' matches any run of bytes. */
bool tsec__glob_segment(const char *pat, size_t pn, const char *s, size_t sn);

/*
 * Domain match by certmagic's rule: equal label counts, case-insensitive,
 * a "*" label in the pattern matches exactly one non-empty label.  The
 * pattern must be lower case (the compiler lowers it).
 */
bool tsec__domain_match(const char *pat, size_t pn, const char *d, size_t dn);

/* Parses an action name; returns its enum value or -1. */
int tsec__action_parse(const char *p, size_t n);

/* 64-bit FNV-1a of (seed, bytes): the hash of one segment or name. */
static inline uint64_t tsec__hash(uint64_t seed, const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/*
 * Hash of an edge (parent, bytes) from the bytes' own hash, so a request
 * hashes each key segment once and reuses it in every trie it walks.
 */
static inline uint64_t tsec__edge_hash(uint64_t h, uint32_t parent)
{
	h ^= (uint64_t)parent * 0x9e3779b97f4a7c15ull;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ull;
	return h ^ (h >> 32);
}

/* ---- certificates (module/cert.c) ---- */

enum tsec__key_type {
	TSEC__KEYTYPE_OTHER = 0,
	TSEC__KEYTYPE_RSA,
	TSEC__KEYTYPE_EC_P256,
	TSEC__KEYTYPE_EC_P384,
	TSEC__KEYTYPE_ED25519,
	TSEC__KEYTYPE__COUNT
};

#define TSEC__CERT_SANS 32

/* What a condition needs to know of a certificate, parsed once. */
struct tsec__cert_facts {
	uint8_t hash[32];            /* SHA-256 of the PEM */
	int ok;                      /* 0: did not parse; see error */
	char error[96];
	int64_t not_after;           /* unix seconds */
	uint32_t key_type;           /* enum tsec__key_type */
	uint32_t rsa_bits;
	uint32_t nsans;
	uint16_t san_off[TSEC__CERT_SANS];
	uint8_t san_len[TSEC__CERT_SANS];
	size_t names_len;
	char names[2048];            /* DNS SANs, lower case */
};

struct tsec__certcache;

/* A cache of parsed certificates, 64 entries, FIFO.  Thread-safe. */
int tsec__certcache_new(struct tsec__certcache **out);
void tsec__certcache_free(struct tsec__certcache **c);
uint32_t tsec__certcache_size(struct tsec__certcache *c);

/*
 * Fills *f for a PEM: from the cache if it holds the PEM's hash, else by
 * parsing it, storing the result when `insert` (Evaluate passes false so
 * that it changes nothing).  c may be NULL.  Thread-safe.
 */
void tsec__cert_facts_get(struct tsec__certcache *c, bool insert,
			  const char *pem, size_t len,
			  struct tsec__cert_facts *f);

/* Key type names ("rsa", "ec-p256", "ec-p384", "ed25519"). */
int tsec__key_type_parse(const char *s, size_t n);
const char *tsec__key_type_name(unsigned t);

/* ---- the compiled policy (module/compile.c) ---- */

#define TSEC__WHEN_TTL_MAX   (1u << 0)
#define TSEC__WHEN_SIZE_MAX  (1u << 1)
#define TSEC__WHEN_RECURSIVE (1u << 2)
#define TSEC__WHEN_CERT      (1u << 3)

#define TSEC__CERT_SAN       (1u << 0)
#define TSEC__CERT_REMAINING (1u << 1)
#define TSEC__CERT_RSA_BITS  (1u << 2)
#define TSEC__CERT_KEY_TYPES (1u << 3)

struct tsec__rule {
	char id[TSEC_ID_MAX];
	uint32_t order;              /* position in policy, floors first */
	uint8_t effect;              /* enum tsec_effect */
	uint8_t recursive;           /* value for TSEC__WHEN_RECURSIVE */
	uint16_t actions;            /* bit per enum tsec_action */
	uint32_t when;               /* TSEC__WHEN_* */
	uint64_t ttl_ms_max;
	uint64_t size_max;
	uint32_t cert;               /* TSEC__CERT_* */
	uint32_t key_types;          /* bit per enum tsec__key_type */
	uint64_t min_remaining_s;
	uint32_t min_rsa_bits;
	uint32_t dom_first;          /* index into policy->doms */
	uint32_t dom_count;          /* 0: no domain constraint */
};

/* A domain pattern: bytes in the string arena, lower case. */
struct tsec__dom {
	uint32_t off;
	uint32_t len;
};

/* A node of the resource trie.  Lists are singly linked by index; 0 ends. */
struct tsec__node {
	uint32_t globs;              /* first glob edge */
	uint32_t dstar;              /* child reached through "**", or 0 */
	uint32_t terms;              /* first terminal entry */
	uint32_t jumps;              /* principal roots only: shared tries */
};

/*
 * A principal root's link to a trie it shares: a rule with several
 * principal patterns indexes its resources once, under a root of its
 * own, and each principal's root jumps there, so principals times
 * resources never multiply into nodes.
 */
struct tsec__jump {
	uint32_t target;
	uint32_t next;
};

/* Shapes of a glob segment, decided at compile time for a fast match. */
enum tsec__glob_kind {
	TSEC__GLOB_ANY = 0,          /* "*" */
	TSEC__GLOB_SUFFIX,           /* "*.crt": one star, first */
	TSEC__GLOB_PREFIX,           /* "wildcard_*": one star, last */
	TSEC__GLOB_GENERAL,          /* anything else */
};

struct tsec__glob {
	uint32_t off, len;           /* segment pattern in the arena */
	uint32_t child;
	uint32_t next;
	uint32_t kind;               /* enum tsec__glob_kind */
};

/* Matches segment s against glob g of policy arena a. */
static inline bool tsec__glob_edge_match(const char *a,
					 const struct tsec__glob *g,
					 const char *s, size_t sn)
{
	const char *p = a + g->off;
	size_t fix = g->len - 1;

	switch (g->kind) {
	case TSEC__GLOB_ANY:
		return true;
	case TSEC__GLOB_SUFFIX:
		return sn >= fix && memcmp(s + sn - fix, p + 1, fix) == 0;
	case TSEC__GLOB_PREFIX:
		return sn >= fix && memcmp(s, p, fix) == 0;
	default:
		return tsec__glob_segment(p, g->len, s, sn);
	}
}

/*
 * A rule ending at a node.  Once compiled, a node's entries run by effect
 * (floor, deny, allow), each run by rule order; `skip` is the first entry
 * of the next run, so Check can leave a run once it has all it needs.
 */
struct tsec__term {
	uint32_t rule;
	uint32_t next;
	uint32_t skip;
};

/*
 * Literal edges and principal roots share one open-addressing table keyed
 * by (parent, bytes): parent is a node id, or one of the TSEC__ROOT_*
 * namespaces for principal ids and role names.
 */
struct tsec__edge {
	uint64_t hash;
	uint32_t parent;
	uint32_t off, len;
	uint32_t child;              /* 0: empty slot */
};

#define TSEC__NS_PRINCIPAL 0xffffffffu
#define TSEC__NS_ROLE      0xfffffffeu

/*
 * Immutable once compiled; shared by every thread that calls.  Each
 * principal pattern owns a resource trie: the root for an id or a role is
 * found in the edge table, the root for "*" is `any_root`.
 */
struct tsec__policy {
	struct tsec__rule *rules;
	uint32_t nrules;
	struct tsec__node *nodes;
	uint32_t nnodes;
	struct tsec__glob *globs;
	uint32_t nglobs;
	struct tsec__term *terms;
	uint32_t nterms;
	struct tsec__jump *jumps;
	uint32_t njumps;
	struct tsec__dom *doms;
	uint32_t ndoms;
	struct tsec__edge *edges;
	uint32_t edge_mask;          /* table size - 1 (a power of two) */
	uint32_t nedges;
	uint32_t any_root;
	uint64_t seed;
	char *arena;
	size_t arena_len;
	size_t arena_cap;
	/* Allocation sizes, kept for growth during compile. */
	uint32_t cap_rules, cap_nodes, cap_globs, cap_terms, cap_doms, cap_jumps;
};

/*
 * Parses and compiles a JSON policy of len bytes into a new policy
 * (*out, free with tsec__policy_free).  On error returns TSEC_EPOLICY
 * (or TSEC_ENOMEM) and names the place as a JSON pointer in err->where.
 */
int tsec__policy_compile(const char *text, size_t len,
			 struct tsec__policy **out, struct tsec_error *err);

/*
 * Compiles only to find errors: every rule's error goes into
 * errs[0..max) (*nerrs counts them all, even past max) instead of
 * stopping at the first; an error outside the rules stops there.
 * Returns 0 for a good policy, else TSEC_EPOLICY or TSEC_ENOMEM.
 */
int tsec__policy_lint(const char *text, size_t len, struct tsec_error *errs,
		      size_t max, size_t *nerrs);

/* Frees a policy and sets *p to NULL.  Accepts NULL. */
void tsec__policy_free(struct tsec__policy **p);

/*
 * Finds the child of `parent` along literal bytes p[0..n) whose
 * tsec__hash(pol->seed, ...) is h; 0 if none.
 */
uint32_t tsec__edge_find(const struct tsec__policy *pol, uint32_t parent,
			 uint64_t h, const char *p, size_t n);

/* ---- evaluation (module/eval.c) ---- */

/*
 * Decides one request against a compiled policy.  `report` may be NULL
 * (Check); when given, it is filled with the full diagnostics and the
 * call is pure: it reads the certificate cache but never fills it.
 * Check (report NULL) stores parsed certificates in `cache` (may be NULL).
 */
void tsec__decide(const struct tsec__policy *pol,
		  const struct tsec_request *req, struct tsec_decision *out,
		  struct tsec_report *rep, struct tsec_explain *ex,
		  struct tsec__certcache *cache);

#endif
