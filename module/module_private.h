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

/* ---- keys (module/key.c) ---- */

/*
 * A parsed, validated key: segments point into the caller's buffer, which
 * must outlive the struct.  Derived attributes follow the certmagic
 * layout.  issuer_seg/domain_seg are segment indexes or -1.
 */
struct tsec__key {
	const char *base;
	uint16_t nseg;
	uint16_t off[TSEC_KEY_SEGMENTS];
	uint16_t len[TSEC_KEY_SEGMENTS];
	uint8_t kind;                /* enum tsec_kind */
	int8_t issuer_seg;
	int8_t domain_seg;
	uint8_t domain_wild;         /* domain segment starts with wildcard_ */
};

#define TSEC__WILDCARD_PREFIX "wildcard_"
#define TSEC__WILDCARD_PREFIX_LEN 9

/*
 * Validates key p[0..n) by the key rules and fills *k.  allow_root lets
 * a key reduce to the root (lists only).  On failure returns TSEC_EKEY
 * and writes a reason (NUL-terminated) into why[0..whylen).  Pure,
 * thread-safe, no allocation.
 */
int tsec__key_parse(const char *p, size_t n, bool allow_root,
		    struct tsec__key *k, char *why, size_t whylen);

/* Writes the normalised key ("a/b/c") into out[0..outlen); returns length. */
size_t tsec__key_format(const struct tsec__key *k, char *out, size_t outlen);

/*
 * Writes the key's domain into out (wildcard_ read back as "*."), returns
 * its length, 0 when the key has none.
 */
size_t tsec__key_domain(const struct tsec__key *k, char *out, size_t outlen);

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

/* ---- the compiled policy (module/compile.c) ---- */

#define TSEC__WHEN_TTL_MAX   (1u << 0)
#define TSEC__WHEN_SIZE_MAX  (1u << 1)
#define TSEC__WHEN_RECURSIVE (1u << 2)

struct tsec__rule {
	char id[TSEC_ID_MAX];
	uint32_t order;              /* position in policy, floors first */
	uint8_t effect;              /* enum tsec_effect */
	uint8_t recursive;           /* value for TSEC__WHEN_RECURSIVE */
	uint16_t actions;            /* bit per enum tsec_action */
	uint32_t when;               /* TSEC__WHEN_* */
	uint64_t ttl_ms_max;
	uint64_t size_max;
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

struct tsec__term {
	uint32_t rule;
	uint32_t next;
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
	uint32_t cap_rules, cap_nodes, cap_globs, cap_terms, cap_doms;
};

/*
 * Parses and compiles a JSON policy of len bytes into a new policy
 * (*out, free with tsec__policy_free).  On error returns TSEC_EPOLICY
 * (or TSEC_ENOMEM) and names the place as a JSON pointer in err->where.
 */
int tsec__policy_compile(const char *text, size_t len,
			 struct tsec__policy **out, struct tsec_error *err);

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
 * (Check); when given, it is filled with the full diagnostics.  Pure:
 * reads the policy and the request, writes only *out and *report.
 */
void tsec__decide(const struct tsec__policy *pol,
		  const struct tsec_request *req, struct tsec_decision *out,
		  struct tsec_report *report);

#endif
