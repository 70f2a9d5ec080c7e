/*
 * The compiled tables: one string arena, one hash table of literal edges
 * shared by every trie, nodes with their glob and "**" children, and the
 * terminal entries that name rules (module_private.h shows their shape).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "module/compile_private.h"

/* Grows an array of `size`-byte items to hold at least need items. */
int tsec__grow(void **arr, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t ncap;
	void *n;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 16;
	while (ncap < need) {
		if (ncap > UINT32_MAX / 2)
			return TSEC_ENOMEM;
		ncap *= 2;
	}
	n = realloc(*arr, (size_t)ncap * size);
	if (!n)
		return TSEC_ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

int tsec__arena_add(struct tsec__policy *pol, const char *p, size_t n,
		     uint32_t *off)
{
	if (pol->arena_len + n > UINT32_MAX)
		return TSEC_ENOMEM;
	if (pol->arena_len + n > pol->arena_cap) {
		size_t ncap = pol->arena_cap ? pol->arena_cap : 4096;
		char *a;
		while (ncap < pol->arena_len + n)
			ncap *= 2;
		a = realloc(pol->arena, ncap);
		if (!a)
			return TSEC_ENOMEM;
		pol->arena = a;
		pol->arena_cap = ncap;
	}
	memcpy(pol->arena + pol->arena_len, p, n);
	*off = (uint32_t)pol->arena_len;
	pol->arena_len += n;
	return 0;
}

static uint64_t edge_hash(const struct tsec__policy *pol, uint32_t parent,
			  const char *p, size_t n)
{
	return tsec__edge_hash(tsec__hash(pol->seed, p, n), parent);
}

static int edges_resize(struct tsec__policy *pol, uint32_t nsize)
{
	struct tsec__edge *n = calloc(nsize, sizeof(*n));

	if (!n)
		return TSEC_ENOMEM;
	for (uint32_t i = 0; pol->edges && i <= pol->edge_mask; i++) {
		const struct tsec__edge *e = &pol->edges[i];
		uint32_t j;
		if (!e->child)
			continue;
		j = (uint32_t)e->hash & (nsize - 1);
		while (n[j].child)
			j = (j + 1) & (nsize - 1);
		n[j] = *e;
	}
	free(pol->edges);
	pol->edges = n;
	pol->edge_mask = nsize - 1;
	return 0;
}

/*
 * Finds or adds the edge (parent, bytes) -> value.  A new edge takes
 * *value as its child; an existing one returns its child in *value and
 * sets *found.
 */
int tsec__edge_put(struct tsec__policy *pol, uint32_t parent, const char *p,
		    size_t n, uint32_t *value, bool *found)
{
	uint64_t h;
	uint32_t i, off;

	if ((pol->nedges + 1) * 2 > pol->edge_mask + 1 &&
	    edges_resize(pol, (pol->edge_mask + 1) * 2))
		return TSEC_ENOMEM;
	h = edge_hash(pol, parent, p, n);
	i = (uint32_t)h & pol->edge_mask;
	for (;;) {
		struct tsec__edge *e = &pol->edges[i];
		if (e->child == 0)
			break;
		if (e->hash == h && e->parent == parent && e->len == n &&
		    memcmp(pol->arena + e->off, p, n) == 0) {
			*value = e->child;
			*found = true;
			return 0;
		}
		i = (i + 1) & pol->edge_mask;
	}
	if (tsec__arena_add(pol, p, n, &off))
		return TSEC_ENOMEM;
	pol->edges[i] = (struct tsec__edge){ h, parent, off, (uint32_t)n, *value };
	pol->nedges++;
	*found = false;
	return 0;
}

int tsec__node_new(struct tsec__policy *pol, uint32_t *id)
{
	if (tsec__grow((void **)&pol->nodes, &pol->cap_nodes, pol->nnodes + 1,
		 sizeof(*pol->nodes)))
		return TSEC_ENOMEM;
	pol->nodes[pol->nnodes] = (struct tsec__node){ 0 };
	*id = pol->nnodes++;
	return 0;
}

/* Child of `node` along a literal segment, created if missing. */
int tsec__child_literal(struct tsec__policy *pol, uint32_t node,
			 const char *s, size_t n, uint32_t *out)
{
	uint32_t id = pol->nnodes;
	bool found;

	if (tsec__edge_put(pol, node, s, n, &id, &found))
		return TSEC_ENOMEM;
	if (!found && tsec__node_new(pol, &id))
		return TSEC_ENOMEM;
	if (!found && node < pol->nnodes)
		pol->nodes[node].lits++;
	*out = id;
	return 0;
}

/*
 * A node's glob children are found by their text through the edge table,
 * under the parent node | TSEC__NS_GLOB (a namespace no node id reaches,
 * so a literal lookup never meets one): finding a sibling was a walk of
 * the node's list, quadratic in distinct globs under one node (issue 21:
 * 32,000 rules 3.1 s).  The list stays, for the walk.
 */
int tsec__child_glob(struct tsec__policy *pol, uint32_t node, const char *s,
		      size_t n, uint32_t *out)
{
	uint32_t g = pol->nglobs, id;
	bool found;

	if (tsec__grow((void **)&pol->globs, &pol->cap_globs, pol->nglobs + 1,
		       sizeof(*pol->globs)) ||
	    tsec__edge_put(pol, node | TSEC__NS_GLOB, s, n, &g, &found))
		return TSEC_ENOMEM;
	if (found) {
		*out = pol->globs[g].child;
		return 0;
	}
	if (tsec__node_new(pol, &id))
		return TSEC_ENOMEM;
	g = pol->nglobs++;
	if (tsec__arena_add(pol, s, n, &pol->globs[g].off))
		return TSEC_ENOMEM;
	pol->globs[g].len = (uint32_t)n;
	{
		const char *star = memchr(s, '*', n);
		bool one = memchr(star + 1, '*', n - (size_t)(star - s) - 1) == NULL;
		pol->globs[g].kind = n == 1 ? TSEC__GLOB_ANY
			: one && star == s ? TSEC__GLOB_SUFFIX
			: one && star == s + n - 1 ? TSEC__GLOB_PREFIX
			: TSEC__GLOB_GENERAL;
	}
	pol->globs[g].child = id;
	pol->globs[g].next = pol->nodes[node].globs;
	pol->nodes[node].globs = g;
	*out = id;
	return 0;
}

int tsec__child_dstar(struct tsec__policy *pol, uint32_t node, uint32_t *out)
{
	uint32_t id;

	if (pol->nodes[node].dstar) {
		*out = pol->nodes[node].dstar;
		return 0;
	}
	if (tsec__node_new(pol, &id))
		return TSEC_ENOMEM;
	pol->nodes[node].dstar = id;
	*out = id;
	return 0;
}

int tsec__term_add(struct tsec__policy *pol, uint32_t node, uint32_t rule)
{
	uint32_t t = pol->nodes[node].terms;

	/*
	 * Rules are indexed one at a time, so a rule that reaches this node
	 * twice (two of its patterns, or two principals, lead here) finds its
	 * own entry at the head: one comparison, not a walk of every rule
	 * that ends here (which made 80,000 rules on one resource quadratic).
	 */
	if (t && pol->terms[t].rule == rule)
		return 0;
	if (tsec__grow((void **)&pol->terms, &pol->cap_terms, pol->nterms + 1,
		 sizeof(*pol->terms)))
		return TSEC_ENOMEM;
	t = pol->nterms++;
	pol->terms[t].rule = rule;
	pol->terms[t].next = pol->nodes[node].terms;
	pol->nodes[node].terms = t;
	return 0;
}

static const struct tsec__policy *sorting;

static int by_effect_then_order(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	const struct tsec__rule *rx = &sorting->rules[sorting->terms[x].rule];
	const struct tsec__rule *ry = &sorting->rules[sorting->terms[y].rule];

	if (rx->effect != ry->effect)
		return rx->effect < ry->effect ? -1 : 1;
	return rx->order < ry->order ? -1 : rx->order > ry->order;
}

/*
 * Each node's actions (`bits`, module_private.h): the actions of the rules at it and below it, so a
 * walk leaves a subtrie that holds no rule for the request's action (and,
 * in the high half, of its floors and denies: a Check that has met one
 * leaves a subtrie with only allows).  A
 * child is always created after its parent, so one pass from the last
 * node to the first carries every node's actions up to its parent.
 */
static int acts_below(struct tsec__policy *pol)
{
	uint32_t *up = calloc(pol->nnodes, sizeof(*up));

	if (!up)
		return TSEC_ENOMEM;
	for (uint32_t i = 0; i <= pol->edge_mask; i++) {
		const struct tsec__edge *e = &pol->edges[i];
		if (e->child && e->parent < pol->nnodes && e->child < pol->nnodes)
			up[e->child] = e->parent;
	}
	for (uint32_t nd = 0; nd < pol->nnodes; nd++) {
		struct tsec__node *n = &pol->nodes[nd];
		for (uint32_t g = n->globs; g; g = pol->globs[g].next)
			up[pol->globs[g].child] = nd;
		if (n->dstar)
			up[n->dstar] = nd;
		for (uint32_t t = n->terms; t; t = pol->terms[t].next) {
			const struct tsec__term *tm = &pol->terms[t];
			n->bits |= tm->actions;
			if (tm->effect != TSEC_EFFECT_ALLOW)
				n->bits |= (uint32_t)tm->actions << TSEC__ACTS_FD_SHIFT;
		}
	}
	for (uint32_t nd = 1; nd < pol->nnodes; nd++) {
		if (up[nd] >= nd) {
			/* Not the order this relies on: no node may be skipped. */
			for (uint32_t m = 0; m < pol->nnodes; m++)
				pol->nodes[m].bits |= TSEC__ACTS_ALL;
			free(up);
			return 0;
		}
	}
	for (uint32_t nd = pol->nnodes; nd-- > 1;)
		if (up[nd])
			pol->nodes[up[nd]].bits |= pol->nodes[nd].bits & TSEC__ACTS_ALL;
	free(up);
	return 0;
}

/*
 * A node with many prefix globs ("d1-*", "d2-*", ...: one per customer)
 * or suffix globs was a walk of all of them per request (32,000 siblings:
 * 99 us a Check).  Past TSEC__GLOB_INDEX_MIN of one kind they leave the
 * node's list for an index entry (module_private.h): a Check then costs
 * one lookup per distinct length of their fixed parts.
 */
static int index_kind(struct tsec__policy *pol, uint32_t nd, uint16_t kind,
		      uint16_t index_kind, uint32_t ns)
{
	struct tsec__node *n = &pol->nodes[nd];
	uint8_t lens[256];
	bool seen[256] = { false };
	uint32_t count = 0, nlens = 0, g, ix, *link;

	for (g = n->globs; g; g = pol->globs[g].next)
		count += pol->globs[g].kind == kind;
	if (count < TSEC__GLOB_INDEX_MIN)
		return 0;
	for (g = n->globs; g; g = pol->globs[g].next) {
		const struct tsec__glob *gl = &pol->globs[g];
		char fixed[256];
		uint32_t value = g, len = gl->len - 1;
		bool found;
		if (gl->kind != kind)
			continue;
		/* A copy: adding the edge may move the arena. */
		memcpy(fixed, pol->arena + gl->off + (kind == TSEC__GLOB_SUFFIX), len);
		if (tsec__edge_put(pol, nd | ns, fixed, len, &value, &found))
			return TSEC_ENOMEM;
		seen[len] = true;
	}
	for (uint32_t l = 1; l < 256; l++)
		if (seen[l])
			lens[nlens++] = (uint8_t)l;
	if (tsec__grow((void **)&pol->globs, &pol->cap_globs, pol->nglobs + 1,
		       sizeof(*pol->globs)))
		return TSEC_ENOMEM;
	ix = pol->nglobs++;
	pol->globs[ix] = (struct tsec__glob){ .kind = index_kind, .len = nlens,
					      .leaf = TSEC__GLOB_LEAF_INDEX };
	if (tsec__arena_add(pol, (const char *)lens, nlens, &pol->globs[ix].off))
		return TSEC_ENOMEM;
	/* Out of the list, the index first. */
	for (link = &n->globs; *link;) {
		if (pol->globs[*link].kind == kind)
			*link = pol->globs[*link].next;
		else
			link = &pol->globs[*link].next;
	}
	pol->globs[ix].next = n->globs;
	n->globs = ix;
	return 0;
}

static int index_globs(struct tsec__policy *pol)
{
	for (uint32_t nd = 0; nd < pol->nnodes; nd++)
		if (index_kind(pol, nd, TSEC__GLOB_PREFIX, TSEC__GLOB_PREFIXES, TSEC__NS_PREFIX) ||
		    index_kind(pol, nd, TSEC__GLOB_SUFFIX, TSEC__GLOB_SUFFIXES, TSEC__NS_SUFFIX))
			return TSEC_ENOMEM;
	return 0;
}

int tsec__terms_finish(struct tsec__policy *pol)
{
	uint32_t *v = NULL, cap = 0;
	int rc = 0;

	/* qsort has no context argument; compiling is single-threaded per
	 * policy, but two policies may compile at once: a lock keeps the
	 * comparator's policy for the one sort it serves. */
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

	pthread_mutex_lock(&mu);
	sorting = pol;
	for (uint32_t nd = 0; nd < pol->nnodes && !rc; nd++) {
		uint32_t n = 0, t;
		for (t = pol->nodes[nd].terms; t; t = pol->terms[t].next)
			n++;
		if (n == 0)
			continue;
		if (n > cap) {
			uint32_t *nv = realloc(v, (size_t)n * sizeof(*v));
			if (!nv) {
				rc = TSEC_ENOMEM;
				break;
			}
			v = nv;
			cap = n;
		}
		n = 0;
		for (t = pol->nodes[nd].terms; t; t = pol->terms[t].next)
			v[n++] = t;
		qsort(v, n, sizeof(*v), by_effect_then_order);
		pol->nodes[nd].terms = v[0];
		/* Backwards, so each entry's skip is known in one pass. */
		for (uint32_t i = n, skip = 0; i-- > 0;) {
			if (i + 1 < n && pol->rules[pol->terms[v[i]].rule].effect !=
					 pol->rules[pol->terms[v[i + 1]].rule].effect)
				skip = v[i + 1];
			pol->terms[v[i]].next = i + 1 < n ? v[i + 1] : 0;
			pol->terms[v[i]].skip = skip;
		}
	}
	sorting = NULL;
	pthread_mutex_unlock(&mu);
	free(v);
	if (rc)
		return rc;

	/* What the walk needs without reading a rule or a child. */
	for (uint32_t t = 1; t < pol->nterms; t++) {
		const struct tsec__rule *r = &pol->rules[pol->terms[t].rule];
		pol->terms[t].actions = r->actions;
		pol->terms[t].effect = r->effect;
		pol->terms[t].plain = !r->dom_count && !r->when && !r->exc_count;
	}
	for (uint32_t nd = 0; nd < pol->nnodes; nd++) {
		struct tsec__node *n = &pol->nodes[nd];
		if (!n->lits && !n->globs && !n->dstar)
			n->shape |= TSEC__SHAPE_LEAF;
	}
	if (acts_below(pol))
		return TSEC_ENOMEM;
	for (uint32_t g = 1; g < pol->nglobs; g++)
		pol->globs[g].leaf = (pol->nodes[pol->globs[g].child].shape & TSEC__SHAPE_LEAF) != 0;
	for (uint32_t nd = 0; nd < pol->nnodes; nd++) {
		struct tsec__node *n = &pol->nodes[nd];
		bool tail = !n->lits && !n->dstar && n->globs;
		for (uint32_t g = n->globs; g && tail; g = pol->globs[g].next)
			tail = pol->globs[g].leaf;
		if (tail)
			n->shape |= TSEC__SHAPE_TAIL;
		if (n->lits && !n->globs && !n->dstar)
			n->shape |= TSEC__SHAPE_LITS;
		if (!n->lits && !n->dstar && n->globs && !pol->globs[n->globs].next &&
		    !pol->globs[n->globs].leaf)
			n->shape |= TSEC__SHAPE_GLOB1;
	}
	/* Last: the shapes above read the whole lists. */
	return index_globs(pol);
}

int tsec__jump_add(struct tsec__policy *pol, uint32_t root, uint32_t target)
{
	uint32_t j = pol->nodes[root].jumps;

	if (j && pol->jumps[j].target == target)
		return 0; /* the same principal twice in one rule */
	if (tsec__grow((void **)&pol->jumps, &pol->cap_jumps, pol->njumps + 1,
		       sizeof(*pol->jumps)))
		return TSEC_ENOMEM;
	j = pol->njumps++;
	pol->jumps[j].target = target;
	pol->jumps[j].next = pol->nodes[root].jumps;
	pol->nodes[root].jumps = j;
	return 0;
}

/*
 * A new, empty policy with room for about `rules` rules, so that compiling
 * a large policy does not spend its time copying arrays as they grow.
 * The estimates are per rule of a typical policy; arrays still grow past
 * them when needed.
 */
int tsec__policy_new(struct tsec__policy **out, size_t len, size_t rules)
{
	struct tsec__policy *pol = calloc(1, sizeof(*pol));
	uint32_t unused, slots = 64;

	if (rules > len / 16 || rules > (1u << 24))
		rules = len / 16 < (1u << 24) ? len / 16 : (1u << 24);
	while (slots < rules * 8)
		slots *= 2;

	*out = pol;
	if (!pol)
		return TSEC_ENOMEM;
	/* The seed only spreads hash slots; the policy itself is trusted. */
	pol->seed = 0x7473656370656c69ull ^ (uint64_t)len;
	/* Index 0 of nodes, globs and terms ends a list: reserve it. */
	if (edges_resize(pol, slots) ||
	    tsec__grow((void **)&pol->rules, &pol->cap_rules, (uint32_t)rules + 1,
		 sizeof(*pol->rules)) ||
	    tsec__grow((void **)&pol->nodes, &pol->cap_nodes, (uint32_t)rules * 4 + 2,
		 sizeof(*pol->nodes)) ||
	    tsec__grow((void **)&pol->terms, &pol->cap_terms, (uint32_t)rules * 2 + 1,
		 sizeof(*pol->terms)) ||
	    tsec__grow((void **)&pol->doms, &pol->cap_doms, (uint32_t)rules + 1,
		 sizeof(*pol->doms)) ||
	    tsec__grow((void **)&pol->globs, &pol->cap_globs, (uint32_t)rules + 1,
		 sizeof(*pol->globs)) ||
	    tsec__node_new(pol, &unused) || tsec__node_new(pol, &pol->any_root))
		return TSEC_ENOMEM;
	pol->arena_cap = rules * 48 + 4096;
	if (!(pol->arena = malloc(pol->arena_cap)))
		return TSEC_ENOMEM;
	pol->nglobs = 1;
	pol->nterms = 1;
	pol->njumps = 1; /* index 0 ends a list */
	return 0;
}

void tsec__policy_free(struct tsec__policy **pp)
{
	struct tsec__policy *p;

	if (!pp || !*pp)
		return;
	p = *pp;
	free(p->rules);
	free(p->nodes);
	free(p->globs);
	free(p->terms);
	free(p->jumps);
	free(p->doms);
	free(p->excs);
	free(p->edges);
	free(p->arena);
	free(p);
	*pp = NULL;
}
