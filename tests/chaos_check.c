/*
 * The chaos suite's history checker (tests/chaos_check.h says what it
 * checks).  Times are monotonic microseconds; an interval is [inv, ok].
 * Every check is sound: it names a violation only where no order of the
 * events within their intervals explains the history.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/chaos_check.h"
#include "tinysecurity/types.h"

#define SEARCH_STEPS 50000000L       /* per key: far past any run's need */

struct ctx {
	struct chaos_report *r;
	void (*say)(const char *, const struct chaos_event *, const struct chaos_event *);
	int64_t ttl_us, stale_us;
};

static void violation(struct ctx *x, const char *what, const struct chaos_event *a,
		      const struct chaos_event *b)
{
	if (!x->r->first)
		x->r->first = what;
	if (x->r->violations++ < 20 && x->say)
		x->say(what, a, b);
}

bool chaos_refused(int rc)
{
	/* Answers that say the write was not made: the lock not held (or
	 * held by another), refused by the policy or before it ran, bad
	 * input.  Any other failure may have been applied. */
	return rc == TSEC_ENOTOWNER || rc == TSEC_ENOENT || rc == TSEC_EBUSY ||
	       rc == TSEC_EDENIED || rc == TSEC_EINVAL || rc == TSEC_EPROTO ||
	       rc == TSEC_EKEY || rc == TSEC_ETOOBIG;
}

typedef const struct chaos_event *evp;

static int by_ok(const void *a, const void *b)
{
	evp x = *(const evp *)a, y = *(const evp *)b;

	return x->ok < y->ok ? -1 : x->ok > y->ok;
}

static int by_fence(const void *a, const void *b)
{
	evp x = *(const evp *)a, y = *(const evp *)b;

	return x->fence < y->fence ? -1 : x->fence > y->fence;
}

/* ---- grants and fenced writes ---- */

/*
 * e[0..n) (grants, or accepted fenced writes): none may carry a fence
 * below one answered before it was invoked.  Sorts e by answer; top[i]
 * is then the highest-fenced of e[0..i].
 */
static void rising(struct ctx *x, const char *what, evp *e, size_t n, evp *top)
{
	qsort(e, n, sizeof(*e), by_ok);
	for (size_t i = 0; i < n; i++)
		top[i] = i && top[i - 1]->fence > e[i]->fence ? top[i - 1] : e[i];
	for (size_t j = 0; j < n; j++) {
		size_t lo = 0, hi = n;

		while (lo < hi) {        /* answered before e[j] was invoked */
			size_t mid = (lo + hi) / 2;
			if (e[mid]->ok < e[j]->inv)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo && top[lo - 1]->fence > e[j]->fence)
			violation(x, what, top[lo - 1], e[j]);
	}
}

/*
 * When the holder of grant g stopped believing it held the lock: its
 * acquire or last successful renew, from when it was sent, plus the
 * lease; or earlier, when it released or a renew failed.  ops: the
 * lock's renews and releases, sorted by fence.
 */
static int64_t valid_end(const struct ctx *x, evp g, evp *ops, size_t n)
{
	int64_t end = g->inv + x->ttl_us, cut = INT64_MAX;
	size_t lo = 0, hi = n;

	while (lo < hi) {                /* the first op of g's fence */
		size_t mid = (lo + hi) / 2;
		if (ops[mid]->fence < g->fence)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < n && ops[i]->fence == g->fence; i++) {
		evp e = ops[i];

		if (e->worker != g->worker || memcmp(e->token, g->token, 16))
			continue;
		if (e->kind == CH_RENEW && !e->rc && e->inv + x->ttl_us > end)
			end = e->inv + x->ttl_us;
		if ((e->kind == CH_REL || (e->kind == CH_RENEW && e->rc)) && e->inv < cut)
			cut = e->inv;
	}
	return cut < end ? cut : end;
}

static void check_grants(struct ctx *x, evp *g, size_t n, evp *ops, size_t no, evp *top)
{
	rising(x, CH_GRANT_BACK, g, n, top);
	qsort(g, n, sizeof(*g), by_fence);
	qsort(ops, no, sizeof(*ops), by_fence);
	for (size_t i = 1; i < n; i++) {
		if (g[i]->fence == g[i - 1]->fence)
			violation(x, CH_TWICE, g[i - 1], g[i]);
		else if (g[i]->ok < valid_end(x, g[i - 1], ops, no))
			violation(x, CH_OVERLAP, g[i - 1], g[i]);
	}
}

static int by_token(const void *a, const void *b)
{
	return memcmp((*(const evp *)a)->token, (*(const evp *)b)->token, 16);
}

/*
 * An accepted fenced write from a holder that no longer held the lock:
 * asked for after its own release was answered, or after a grant of a
 * higher fence was.  g: the lock's grants sorted by answer with top[]
 * their running highest; rel: its successful releases sorted by token.
 */
static void check_stale_writes(struct ctx *x, evp *puts, size_t np, evp *g, size_t ng,
			       evp *top, evp *rel, size_t nrel)
{
	for (size_t j = 0; j < np; j++) {
		evp p = puts[j];
		size_t lo = 0, hi = ng;

		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (g[mid]->ok < p->inv)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo && top[lo - 1]->fence > p->fence) {
			violation(x, CH_STALE_WRITE, top[lo - 1], p);
			continue;
		}
		lo = 0;
		hi = nrel;
		while (lo < hi) {        /* the first release of p's token */
			size_t mid = (lo + hi) / 2;
			if (memcmp(rel[mid]->token, p->token, 16) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < nrel && !memcmp(rel[lo]->token, p->token, 16); lo++)
			if (rel[lo]->ok < p->inv) {
				violation(x, CH_STALE_WRITE, rel[lo], p);
				break;
			}
	}
}

/* ---- reads, by name ---- */

/* A write's identity: its value. */
static int by_value(const void *a, const void *b)
{
	evp x = *(const evp *)a, y = *(const evp *)b;

	if (x->fence != y->fence)
		return x->fence < y->fence ? -1 : 1;
	if (x->vworker != y->vworker)
		return x->vworker < y->vworker ? -1 : 1;
	return x->vseq < y->vseq ? -1 : x->vseq > y->vseq;
}

/* The write (of w[0..n), sorted by value) whose value r read, or NULL. */
static evp writer_of(evp r, evp *w, size_t n)
{
	struct chaos_event key = *r;
	evp k = &key, *f;

	f = bsearch(&k, w, n, sizeof(*w), by_value);
	return f ? *f : NULL;
}

/* When write w surely took effect by: its answer when accepted, never
 * known otherwise (INT64_MAX); the initial "no value" at the start. */
static int64_t done_by(evp w)
{
	return !w ? INT64_MIN : w->rc == 0 ? w->ok : INT64_MAX;
}

/* The greatest `inv` among e[0..n) (sorted by ok, prefix maxima in m)
 * answered before t, and which event had it; INT64_MIN when none. */
static int64_t latest_begun(evp *e, const int64_t *m, const size_t *at, size_t n, int64_t t,
			    evp *who)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (e[mid]->ok < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	*who = lo ? e[at[lo - 1]] : NULL;
	return lo ? m[lo - 1] : INT64_MIN;
}

/* Prefix maxima of key(e[i]) over e (sorted by ok): m[i] and its index. */
static void prefix_max(evp *e, size_t n, int64_t (*key)(evp, void *), void *arg, int64_t *m,
		       size_t *at)
{
	for (size_t i = 0; i < n; i++) {
		int64_t v = key(e[i], arg);

		if (i && m[i - 1] >= v) {
			m[i] = m[i - 1];
			at[i] = at[i - 1];
		} else {
			m[i] = v;
			at[i] = i;
		}
	}
}

static int64_t inv_of(evp e, void *arg)
{
	(void)arg;
	return e->inv;
}

/* For a read: when the write it saw began (the initial value: never). */
static int64_t seen_begun(evp r, void *arg)
{
	struct { evp *w; size_t n; } *ws = arg;
	evp w = r->vseq ? writer_of(r, ws->w, ws->n) : NULL;

	return w ? w->inv : INT64_MIN;
}

static void check_reads(struct ctx *x, evp *reads, size_t nr, evp *w, size_t nw, evp *acc,
			size_t na, int64_t *m, size_t *at)
{
	struct { evp *w; size_t n; } ws = { w, nw };

	qsort(w, nw, sizeof(*w), by_value);
	qsort(acc, na, sizeof(*acc), by_ok);
	prefix_max(acc, na, inv_of, NULL, m, at);
	for (size_t i = 0; i < nr; i++) {
		evp r = reads[i], W = r->vseq ? writer_of(r, w, nw) : NULL, w2;

		if (r->vseq && !W) {
			violation(x, CH_PHANTOM, r, r);
			continue;
		}
		if (W && chaos_refused(W->rc)) {
			violation(x, CH_REFUSED, W, r);
			continue;
		}
		if (W && W->inv > r->ok) {
			violation(x, CH_EARLY, W, r);
			continue;
		}
		/* A write acknowledged before the read began (less the
		 * staleness bound), begun after the read's write was done. */
		if (latest_begun(acc, m, at, na, r->inv - x->stale_us, &w2) > done_by(W))
			violation(x, W ? CH_OLD_READ : CH_LOST, w2, r);
	}
	/* A read answered before this one began saw a write begun after the
	 * write this one saw was done. */
	qsort(reads, nr, sizeof(*reads), by_ok);
	prefix_max(reads, nr, seen_begun, &ws, m, at);
	for (size_t i = 0; i < nr; i++) {
		evp r = reads[i], W = r->vseq ? writer_of(r, w, nw) : NULL, r1;

		if ((r->vseq && !W) || (W && (chaos_refused(W->rc) || W->inv > r->ok)))
			continue;        /* named above */
		if (latest_begun(reads, m, at, nr, r->inv - x->stale_us, &r1) > done_by(W))
			violation(x, CH_BACKWARDS, r1, r);
	}
}

/* ---- the whole history of a key: linearizability of a register ---- */

struct op {
	int64_t inv, ok;
	int kind;                    /* 0 write, 1 read */
	int value;                   /* its value's id; 0: none */
	evp ev;
};

struct entry {
	int64_t t;
	int op;
	bool call;
	struct entry *prev, *next, *match;
};

static int by_time(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return (int)y->call - (int)x->call;      /* calls first: concurrent */
}

/* The memo: (hash of the ops linearized, register value), open addressing. */
struct memo {
	uint64_t *k1, *k2;
	int *v;
	size_t cap, n;
};

static bool memo_add(struct memo *m, uint64_t a, uint64_t b, int v)
{
	size_t i;

	if (2 * (m->n + 1) > m->cap) {
		struct memo g = { 0 };

		g.cap = m->cap ? m->cap * 2 : 1 << 16;
		g.k1 = calloc(g.cap, sizeof(*g.k1));
		g.k2 = calloc(g.cap, sizeof(*g.k2));
		g.v = calloc(g.cap, sizeof(*g.v));
		if (!g.k1 || !g.k2 || !g.v)
			abort();
		for (size_t j = 0; j < m->cap; j++)
			if (m->k1[j] || m->k2[j])
				memo_add(&g, m->k1[j], m->k2[j], m->v[j]);
		free(m->k1);
		free(m->k2);
		free(m->v);
		*m = g;
	}
	for (i = (size_t)(a ^ (b >> 7) ^ (uint64_t)v * 0x9e3779b97f4a7c15ull) & (m->cap - 1);
	     m->k1[i] || m->k2[i]; i = (i + 1) & (m->cap - 1))
		if (m->k1[i] == a && m->k2[i] == b && m->v[i] == v)
			return false;
	m->k1[i] = a;
	m->k2[i] = b;
	m->v[i] = v;
	m->n++;
	return true;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void lift(struct entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->match->prev->next = e->match->next;
	e->match->next->prev = e->match->prev;
}

static void unlift(struct entry *e)
{
	e->match->prev->next = e->match;
	e->match->next->prev = e->match;
	e->prev->next = e;
	e->next->prev = e;
}

/*
 * Whether ops[0..n) linearize as a register that starts with no value:
 * Lowe's refinement of the Wing-Gong search.  Take the first pending call
 * whose op fits the state, unless (ops linearized, state) was met before;
 * at a return whose call is still pending, undo the last choice.  NULL
 * when it does, else the op whose return no order could reach.
 */
static evp linearize(struct ctx *x, struct op *ops, size_t n)
{
	struct entry *ent = calloc(2 * n + 2, sizeof(*ent)), *head, *tail, *e;
	struct { struct entry *call; int state; } *stack = calloc(n + 1, sizeof(*stack));
	uint64_t *z1 = calloc(n + 1, sizeof(*z1)), *z2 = calloc(n + 1, sizeof(*z2));
	uint64_t seed = 48, h1 = 0, h2 = 0;
	struct memo memo = { 0 };
	size_t depth = 0;
	long steps = 0;
	int state = 0;
	evp bad = NULL;

	if (!ent || !stack || !z1 || !z2)
		abort();
	for (size_t i = 0; i < n; i++) {
		ent[2 * i] = (struct entry){ ops[i].inv, (int)i, true, NULL, NULL, NULL };
		ent[2 * i + 1] = (struct entry){ ops[i].ok, (int)i, false, NULL, NULL, NULL };
		z1[i] = splitmix(&seed);
		z2[i] = splitmix(&seed);
	}
	qsort(ent, 2 * n, sizeof(*ent), by_time);
	{
		/* Each call's return, found through a table by op. */
		struct entry **ret = calloc(n + 1, sizeof(*ret)), **call = calloc(n + 1, sizeof(*call));

		if (!ret || !call)
			abort();
		for (size_t i = 0; i < 2 * n; i++)
			(ent[i].call ? call : ret)[ent[i].op] = &ent[i];
		for (size_t i = 0; i < n; i++)
			call[i]->match = ret[i];
		free(ret);
		free(call);
	}
	head = &ent[2 * n];
	tail = &ent[2 * n + 1];
	head->next = n ? &ent[0] : tail;
	tail->prev = n ? &ent[2 * n - 1] : head;
	for (size_t i = 0; i < 2 * n; i++) {
		ent[i].prev = i ? &ent[i - 1] : head;
		ent[i].next = i + 1 < 2 * n ? &ent[i + 1] : tail;
	}
	e = head->next;
	while (head->next != tail) {
		if (++steps > SEARCH_STEPS) {
			x->r->gave_up = true;
			break;
		}
		if (e->call) {
			const struct op *o = &ops[e->op];
			bool fits = o->kind == 0 || o->value == state;
			int next = o->kind == 0 ? o->value : state;

			if (fits && memo_add(&memo, h1 ^ z1[e->op], h2 ^ z2[e->op], next)) {
				stack[depth].call = e;
				stack[depth++].state = state;
				state = next;
				h1 ^= z1[e->op];
				h2 ^= z2[e->op];
				lift(e);
				e = head->next;
			} else {
				e = e->next;
			}
			continue;
		}
		if (!depth) {
			bad = ops[e->op].ev;
			break;
		}
		e = stack[--depth].call;
		state = stack[depth].state;
		h1 ^= z1[e->op];
		h2 ^= z2[e->op];
		unlift(e);
		e = e->next;
	}
	x->r->linear_steps += steps;
	free(memo.k1);
	free(memo.k2);
	free(memo.v);
	free(ent);
	free(stack);
	free(z1);
	free(z2);
	return bad;
}

/* One key's register history for the search: acknowledged writes, those
 * of unknown outcome that a read saw (done by that read's answer), and
 * the reads of values the named checks let stand. */
static void check_linear(struct ctx *x, evp *reads, size_t nr, evp *w, size_t nw)
{
	struct op *ops = calloc(nr + nw + 1, sizeof(*ops));
	int64_t *seen_by = calloc(nw + 1, sizeof(*seen_by));
	int *id = calloc(nw + 1, sizeof(*id));
	size_t n = 0;
	int ids = 0;
	evp bad;

	if (!ops || !seen_by || !id)
		abort();
	/* w is sorted by value (check_reads). */
	for (size_t i = 0; i < nw; i++)
		seen_by[i] = INT64_MAX;
	for (size_t i = 0; i < nr; i++) {
		evp W = reads[i]->vseq ? writer_of(reads[i], w, nw) : NULL;

		if (W) {
			size_t k = (size_t)((const evp *)bsearch(&W, w, nw, sizeof(*w), by_value) - w);
			if (reads[i]->ok < seen_by[k])
				seen_by[k] = reads[i]->ok;
		}
	}
	for (size_t i = 0; i < nw; i++) {
		if (chaos_refused(w[i]->rc) || (w[i]->rc && seen_by[i] == INT64_MAX))
			continue;
		id[i] = ++ids;
		ops[n++] = (struct op){ w[i]->inv, w[i]->rc ? seen_by[i] : w[i]->ok, 0, id[i], w[i] };
	}
	for (size_t i = 0; i < nr; i++) {
		evp r = reads[i], W = r->vseq ? writer_of(r, w, nw) : NULL;
		int v = 0;

		if (r->vseq) {
			size_t k;

			if (!W || chaos_refused(W->rc))
				continue;
			k = (size_t)((const evp *)bsearch(&W, w, nw, sizeof(*w), by_value) - w);
			v = id[k];
		}
		ops[n++] = (struct op){ r->inv - x->stale_us, r->ok, 1, v, r };
	}
	if ((bad = linearize(x, ops, n)))
		violation(x, CH_NOT_LINEAR, bad, bad);
	free(ops);
	free(seen_by);
	free(id);
}

void chaos_check(struct chaos_event *ev, size_t n, int locks, int64_t ttl_ms, int64_t stale_ms,
		 void (*say)(const char *, const struct chaos_event *, const struct chaos_event *),
		 struct chaos_report *out)
{
	struct ctx x = { out, say, ttl_ms * 1000, stale_ms * 1000 };
	evp *g = calloc(n + 1, sizeof(*g)), *ops = calloc(n + 1, sizeof(*ops));
	evp *puts = calloc(n + 1, sizeof(*puts)), *acc = calloc(n + 1, sizeof(*acc));
	evp *reads = calloc(n + 1, sizeof(*reads)), *rel = calloc(n + 1, sizeof(*rel));
	evp *top = calloc(n + 1, sizeof(*top));
	int64_t *m = calloc(n + 1, sizeof(*m));
	size_t *at = calloc(n + 1, sizeof(*at));

	memset(out, 0, sizeof(*out));
	if (!g || !ops || !puts || !acc || !reads || !rel || !top || !m || !at)
		abort();
	for (int lock = 0; lock < locks; lock++) {
		size_t ng = 0, no = 0, np = 0, na = 0, nr = 0, nrel = 0;

		for (size_t i = 0; i < n; i++) {
			evp e = &ev[i];

			if (e->lock != lock)
				continue;
			if (e->kind == CH_ACQ && !e->rc)
				g[ng++] = e;
			else if (e->kind == CH_RENEW || e->kind == CH_REL)
				ops[no++] = e;
			if (e->kind == CH_REL && !e->rc)
				rel[nrel++] = e;
			if (e->kind == CH_PUT)
				puts[np++] = e;
			if (e->kind == CH_PUT && !e->rc)
				acc[na++] = e;
			/* A read that failed says nothing; "not found" is a
			 * read of no value. */
			if (e->kind == CH_GET && (!e->rc || e->rc == TSEC_ENOENT))
				reads[nr++] = e;
		}
		check_grants(&x, g, ng, ops, no, top);
		/* rising() left g sorted by fence: by answer again for top[]. */
		rising(&x, CH_WRITE_BACK, acc, na, top);
		qsort(g, ng, sizeof(*g), by_ok);
		for (size_t i = 0; i < ng; i++)
			top[i] = i && top[i - 1]->fence > g[i]->fence ? top[i - 1] : g[i];
		qsort(rel, nrel, sizeof(*rel), by_token);
		check_stale_writes(&x, acc, na, g, ng, top, rel, nrel);
		{
			long before = out->violations;

			check_reads(&x, reads, nr, puts, np, acc, na, m, at);
			/* A key already named needs no search (and a history
			 * far from linear is where the search is slowest). */
			if (out->violations == before)
				check_linear(&x, reads, nr, puts, np);
		}
	}
	free(g);
	free(ops);
	free(puts);
	free(acc);
	free(reads);
	free(rel);
	free(top);
	free(m);
	free(at);
}
