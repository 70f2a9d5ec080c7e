/*
 * Internal to the policy compiler (compile.c, reader.c, rule.c,
 * tables.c): the compile context, the document reader and the table
 * builders.  The rest of the module sees only module_private.h.
 */
#ifndef TSEC_COMPILE_PRIVATE_H
#define TSEC_COMPILE_PRIVATE_H

#include <stdbool.h>

#include <jansson.h>

#include "module/module_private.h"

/*
 * The most a compiled policy may hold.  A rule's principals times its
 * resources times their segments become trie nodes, so a small text can
 * ask for millions of them; past these bounds the policy is refused with
 * the place of the rule that crossed them, before memory runs out.
 * About 50 MiB of nodes, 64 MiB of terminal entries.
 */
#define TSEC__NODES_MAX (4u << 20)
#define TSEC__TERMS_MAX (8u << 20)

/* The namespace of rule ids in the edge table (duplicate ids). */
#define TSEC__NS_RULE_ID 0xfffffffdu

/* One compile (or lint) in progress. */
struct tsec__cc {
	struct tsec__policy *pol;
	struct tsec_error *err;
	const char *section;         /* "floor" or "rules" */
	size_t index;
	/* Lint: every error of every rule is kept here (tsec__cc_fail) and
	 * compiling goes on. */
	struct tsec_error *errs;
	size_t max, nerrs;
	bool failed;
};

/* Reports TSEC_EPOLICY at /section/index[/field[/sub]] (sub < 0: none). */
int tsec__cc_fail(struct tsec__cc *c, const char *field, long sub,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Reports TSEC_ENOMEM. */
int tsec__cc_oom(struct tsec__cc *c);

/* ---- reader.c: the document, one value at a time ---- */

#define JFLAGS (JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES)
struct tsec__doc {
	const char *base, *p, *end;
	struct tsec_error *err;
};
void tsec__doc_skip_ws(struct tsec__doc *d);
/* A syntax error at `at`, with line and column; returns TSEC_EPOLICY. */
int tsec__doc_syntax(struct tsec__doc *d, const char *at, const char *what);
/* Skips white space, then requires the character c. */
int tsec__doc_expect(struct tsec__doc *d, char c, const char *what);
/* Parses one JSON value at the current position into *out (new ref). */
int tsec__doc_value(struct tsec__doc *d, json_t **out);
/* Finds the end of one value without building it; NULL if unterminated.
 * *items counts the objects directly inside a top-level array. */
const char *tsec__doc_skip_value(const char *p, const char *end, size_t *items);

/* ---- rule.c: one rule, parsed then indexed ---- */

/* Compiles one rule object of the given section's effect into c->pol. */
int tsec__rule_compile(struct tsec__cc *c, json_t *obj, uint8_t effect);

/* ---- tables.c: the compiled tables ---- */

/* A new, empty policy sized for about `rules` rules of a `len`-byte text. */
int tsec__policy_new(struct tsec__policy **out, size_t len, size_t rules);
/* Grows an array of `size`-byte items to hold at least need items. */
int tsec__grow(void **arr, uint32_t *cap, uint32_t need, size_t size);
/* Copies p[0..n) into the string arena; *off is where it landed. */
int tsec__arena_add(struct tsec__policy *pol, const char *p, size_t n,
		    uint32_t *off);
/* Finds or inserts the edge (parent, p[0..n)); *val in: value to insert,
 * out: the value stored; *found says which. */
int tsec__edge_put(struct tsec__policy *pol, uint32_t parent, const char *p,
		   size_t n, uint32_t *val, bool *found);
/* The child of node by a literal segment, a glob segment, or "**",
 * created if missing. */
int tsec__child_literal(struct tsec__policy *pol, uint32_t node,
			const char *s, size_t n, uint32_t *out);
int tsec__child_glob(struct tsec__policy *pol, uint32_t node, const char *s,
		     size_t n, uint32_t *out);
int tsec__child_dstar(struct tsec__policy *pol, uint32_t node, uint32_t *out);
/* A new node with no parent (a shared trie's root). */
int tsec__node_new(struct tsec__policy *pol, uint32_t *id);
/* Lets a principal's root jump to a shared trie. */
int tsec__jump_add(struct tsec__policy *pol, uint32_t root, uint32_t target);
/* Orders every node's entries by effect, then rule order, with the skip
 * links Check uses (after the last rule). */
int tsec__terms_finish(struct tsec__policy *pol);
/* Ends rule `rule`'s pattern at node. */
int tsec__term_add(struct tsec__policy *pol, uint32_t node, uint32_t rule);

#endif
