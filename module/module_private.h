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
#include "common/bytes.h"
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

/*
 * The same for a pattern with no "*" label: one case-blind comparison of
 * the whole name, eight bytes at a time.
 */
bool tsec__domain_equal(const char *pat, size_t pn, const char *d, size_t dn);

/* A compiled domain pattern (struct tsec__dom) against d. */
#define tsec__dom_match(arena, dm, d, dn) \
	((dm)->star ? tsec__domain_match((arena) + (dm)->off, (dm)->len, (d), (dn)) \
		    : tsec__domain_equal((arena) + (dm)->off, (dm)->len, (d), (dn)))

/* Parses an action name; returns its enum value or -1. */
int tsec__action_parse(const char *p, size_t n);

/*
 * Hash of one segment or name, eight bytes per step (the last step's
 * load overlaps the one before it, so no byte past p[n-1] is read): a
 * key's segment costs a few multiplications, not one per byte.  Only
 * spreads table slots; an edge is found by comparing its bytes.  In
 * pieces, so that a name can be checked in the same pass (eval.c).
 */
#define TSEC__HASH_K 0x9fb21c651e98df25ull

static inline uint64_t tsec__hash_begin(uint64_t seed, size_t n)
{
	return seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull);
}

static inline uint64_t tsec__hash_step(uint64_t h, uint64_t w)
{
	h = (h ^ w) * TSEC__HASH_K;
	return h ^ (h >> 29);
}

/* The last word of n < 8 bytes: overlapping loads, no byte read twice
 * past the end. */
static inline uint64_t tsec__hash_short(const char *p, size_t n)
{
	if (n >= 4)
		return (uint64_t)tsec__load4(p) << 32 | tsec__load4(p + n - 4);
	if (n > 0)
		return (uint64_t)(unsigned char)p[0] << 16 |
		       (uint64_t)(unsigned char)p[n >> 1] << 8 | (unsigned char)p[n - 1];
	return 0;
}

__attribute__((always_inline))
static inline uint64_t tsec__hash(uint64_t seed, const char *p, size_t n)
{
	uint64_t h = tsec__hash_begin(seed, n);

	if (n < 8)
		return tsec__hash_step(h, tsec__hash_short(p, n));
	for (size_t i = 0; i + 8 < n; i += 8)
		h = tsec__hash_step(h, tsec__load8(p + i));
	return tsec__hash_step(h, tsec__load8(p + n - 8));
}

/* p[0..n) == q[0..n), by words where it can (the last load overlapping). */
__attribute__((always_inline))
static inline bool tsec__bytes_eq(const char *p, const char *q, size_t n)
{
	if (n >= 8) {
		if (n <= 16)
			return tsec__load8(p) == tsec__load8(q) &&
			       tsec__load8(p + n - 8) == tsec__load8(q + n - 8);
		for (size_t i = 0; i + 8 < n; i += 8)
			if (tsec__load8(p + i) != tsec__load8(q + i))
				return false;
		return tsec__load8(p + n - 8) == tsec__load8(q + n - 8);
	}
	if (n >= 4)
		return tsec__load4(p) == tsec__load4(q) &&
		       tsec__load4(p + n - 4) == tsec__load4(q + n - 4);
	return n == 0 || (p[0] == q[0] && p[n >> 1] == q[n >> 1] && p[n - 1] == q[n - 1]);
}

#define TSEC__ONES  0x0101010101010101ull
#define TSEC__HIGHS 0x8080808080808080ull

/* Non-zero if a byte of x is a control, a space or DEL (exact as a whole). */
static inline uint64_t tsec__ctl_bytes(uint64_t x)
{
	uint64_t d = x ^ (TSEC__ONES * 0x7f);

	return (((x - TSEC__ONES * 0x21) & ~x) | ((d - TSEC__ONES) & ~d)) & TSEC__HIGHS;
}

/* x with the ASCII capitals of its bytes lowered, and nothing else. */
static inline uint64_t tsec__lower8(uint64_t x)
{
	uint64_t h = x & ~TSEC__HIGHS;
	uint64_t ge_a = h + TSEC__ONES * (0x80 - 'A');
	uint64_t gt_z = h + TSEC__ONES * (0x80 - 'Z' - 1);

	return x | (((ge_a & ~gt_z & ~x) & TSEC__HIGHS) >> 2);
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

/* ---- the compiled policy (module/compile.c) ---- */

/* A rule's conditions: bit 1 << its place in TSEC_CONDITIONS (types.h). */
enum {
#define TSEC_X_WHEN(id, name, carried, bound, lo) TSEC__WHEN_AT_##id,
	TSEC_CONDITIONS(TSEC_X_WHEN)
#undef TSEC_X_WHEN
	TSEC__WHEN_COUNT
};
#define TSEC__WHEN_TTL_MAX   (1u << TSEC__WHEN_AT_ttl_ms_max)
#define TSEC__WHEN_SIZE_MAX  (1u << TSEC__WHEN_AT_size_max)
#define TSEC__WHEN_RECURSIVE (1u << TSEC__WHEN_AT_recursive)
#define TSEC__WHEN_CERT      (1u << TSEC__WHEN_AT_cert)
/* A bound on new names (cert.obtain): counted by the broker, which reads
 * it from the policy; the module only checks it is well formed. */
#define TSEC__WHEN_RATE      (1u << TSEC__WHEN_AT_rate)

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
	uint32_t rate_max;           /* TSEC__WHEN_RATE: new names ... */
	uint32_t rate_window_s;      /* ... per this many seconds */
	uint32_t exc_first;          /* "except": index into policy->excs ... */
	uint32_t exc_count;          /* ... and how many (0: none) */
	uint32_t dom_first;          /* index into policy->doms */
	uint32_t dom_count;          /* 0: no domain constraint */
};

/*
 * The first of the conditions a request's context decides (ttl_ms_max,
 * size_max, recursive) that r sets and the request fails, as its
 * TSEC__WHEN_* bit; 0 when every one holds or r sets none.  The one
 * predicate of each: the walk (eval.c) and the why-not (explain.c) both
 * ask it (issue 53, item 3: each had its own copy).  A context that
 * does not carry a field passes the condition on it.
 */
static inline uint32_t tsec__when_fails(const struct tsec_context *ctx,
					const struct tsec__rule *r)
{
	if ((r->when & TSEC__WHEN_TTL_MAX) && (ctx->has & TSEC_CTX_TTL_MS) &&
	    ctx->ttl_ms > r->ttl_ms_max)
		return TSEC__WHEN_TTL_MAX;
	if ((r->when & TSEC__WHEN_SIZE_MAX) && (ctx->has & TSEC_CTX_SIZE) &&
	    ctx->size > r->size_max)
		return TSEC__WHEN_SIZE_MAX;
	if ((r->when & TSEC__WHEN_RECURSIVE) &&
	    (((ctx->has & TSEC_CTX_RECURSIVE) && ctx->recursive) != (r->recursive != 0)))
		return TSEC__WHEN_RECURSIVE;
	return 0;
}

/* A domain pattern: bytes in the string arena, lower case. */
struct tsec__dom {
	uint32_t off;
	uint32_t len;
	uint32_t star;               /* a label is "*": the general matcher */
};

/* A node of the resource trie.  Lists are singly linked by index; 0 ends. */
struct tsec__node {
	uint32_t lits;               /* literal children (in the edge table) */
	uint32_t globs;              /* first glob edge */
	uint32_t dstar;              /* child reached through "**", or 0 */
	uint32_t terms;              /* first terminal entry */
	uint32_t jumps;              /* principal roots only: shared tries */
	/*
	 * Bit a: a rule at or below is for action a; bit 16 + a: a floor or
	 * deny is (what Check still looks for once one applies).  One word
	 * holds 16 actions, twice.
	 */
	uint32_t bits;
	uint32_t shape;              /* TSEC__SHAPE_*, set when compiled */
};
#define TSEC__ACTS_FD_SHIFT 16
#define TSEC__ACTS_ALL ((((uint32_t)1 << TSEC_ACTION__COUNT) - 1) * 0x10001u)
_Static_assert(TSEC_ACTION__COUNT <= TSEC__ACTS_FD_SHIFT,
	       "a node's action bits hold every action, twice");

/*
 * What a walk can skip, decided once the trie is built: a LEAF has only
 * rules (a walk reaching it before the key's end does nothing); a TAIL
 * has no literal or "**" child and only leaves behind its globs, so only
 * the key's last segment and its end can meet a rule there.
 */
#define TSEC__SHAPE_LEAF (1u << 0)
#define TSEC__SHAPE_TAIL (1u << 1)
/* The only way on is the literal table (LITS) or one glob to a non-leaf
 * (GLOB1): a walk goes down such nodes in a loop. */
#define TSEC__SHAPE_LITS  (1u << 2)
#define TSEC__SHAPE_GLOB1 (1u << 3)

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
	/*
	 * Not a pattern: the index of a node's prefix (or suffix) globs,
	 * when it has TSEC__GLOB_INDEX_MIN or more.  off and len hold the
	 * distinct lengths of their fixed parts, ascending, a byte each; a
	 * glob is found by its fixed part under the node | TSEC__NS_PREFIX
	 * (or TSEC__NS_SUFFIX) in the edge table, one lookup a length.
	 */
	TSEC__GLOB_PREFIXES,
	TSEC__GLOB_SUFFIXES,
};
#define TSEC__GLOB_INDEX_MIN 8

struct tsec__glob {
	uint32_t off, len;           /* segment pattern in the arena */
	uint32_t child;
	uint32_t next;
	uint16_t kind;               /* enum tsec__glob_kind */
	uint16_t leaf;               /* child is a TSEC__SHAPE_LEAF, or: */
};
/* The entry is an index (TSEC__GLOB_PREFIXES, _SUFFIXES), not a glob:
 * kept in `leaf`, which the walk reads first anyway. */
#define TSEC__GLOB_LEAF_INDEX 2

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
		return sn >= fix && tsec__bytes_eq(s + sn - fix, p + 1, fix);
	case TSEC__GLOB_PREFIX:
		return sn >= fix && tsec__bytes_eq(s, p, fix);
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
	uint16_t actions;            /* the rule's, so a walk reads no rule */
	uint8_t effect;              /* for an action it does not name */
	uint8_t plain;               /* the rule has no condition: it applies */
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
/* Glob children at compile time: parent node | this (node ids stay
 * below TSEC__NODES_MAX, far under it). */
#define TSEC__NS_GLOB      0x80000000u
/* Indexed prefix and suffix globs (TSEC__GLOB_PREFIXES), node | these. */
#define TSEC__NS_PREFIX    0x40000000u
#define TSEC__NS_SUFFIX    0xc0000000u

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
	/* The principals and roles a floor or deny does not bind ("except"):
	 * the name in the arena, star 1 for a role (its name without
	 * "role:"), 0 for a principal's id. */
	struct tsec__dom *excs;
	uint32_t nexcs, cap_excs;
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

/* Whether req's principal or a role of it is one rule r excepts (eval.c). */
bool tsec__excepted(const struct tsec__policy *pol, const struct tsec__rule *r,
		    const struct tsec_request *req);

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
 * tsec__hash(pol->seed, ...) is hs; 0 if none.  Inline: it is most of
 * what a walk step does.
 */
__attribute__((always_inline))
static inline uint32_t tsec__edge_find(const struct tsec__policy *pol, uint32_t parent,
				       uint64_t hs, const char *p, size_t n)
{
	uint64_t h = tsec__edge_hash(hs, parent);
	uint32_t i = (uint32_t)h & pol->edge_mask;

	for (;;) {
		const struct tsec__edge *e = &pol->edges[i];
		if (e->child == 0)
			return 0;
		if (e->hash == h && e->parent == parent && e->len == n &&
		    tsec__bytes_eq(pol->arena + e->off, p, n))
			return e->child;
		i = (i + 1) & pol->edge_mask;
	}
}

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

/*
 * Check of a batch: tsec__decide of each request, the caller's roots
 * found once while the requests name the same principal and roles.
 */
void tsec__decide_batch(const struct tsec__policy *pol, const struct tsec_request *reqs,
			size_t n, struct tsec_decision *out, struct tsec__certcache *cache);

#endif
