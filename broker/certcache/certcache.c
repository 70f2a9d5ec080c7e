/*
 * The certificate cache: a fixed array of buckets of singly linked name
 * nodes that readers walk with acquire loads, changed only by writers
 * under one mutex; memory is reclaimed after a grace period observed on
 * striped reader counters.
 *
 * Expiry: a lookup skips every certificate past its not_after (it reads
 * the clock once).  Writers keep a min-heap of entries by not_after, so
 * every insert, count and snapshot reclaims all the expired ones, each in
 * O(log n), and a full cache evicts a live certificate (oldest first)
 * only when none has expired; no lookup or insert scans the whole cache.
 *
 * Failure backoff (certcache_fails.c): per name, the failures in a row
 * to obtain a certificate and when the last was, in a table of its own
 * (at most capacity names, the first recorded dropped first), under the
 * writers' mutex: asked only on a miss, never on a hit.
 *
 * Names match by certmagic's progressive rule: the name itself, then the
 * name with its leftmost label replaced by "*", then its two leftmost
 * labels, and so on ("*.*.example.com" serves "a.b.example.com").  Each
 * candidate is one hash-bucket probe, compared in place; candidates past
 * the first "*" are tried only while some cached name starts "*.*".
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tinysecurity/certcache.h"
#include "broker/certcache/certcache_private.h"
#include "common/error.h"

#define STRIPES 16

struct entry;

struct node {
	_Atomic(struct node *) next;
	struct entry *e;
	uint64_t hash;
	uint32_t len;
	char name[];                 /* lower case, NUL-terminated */
};

struct entry {
	uint8_t id[32];
	void *data;
	int64_t not_after;
	size_t heap_at;              /* writer-only place in the expiry heap */
	uint64_t seq;                /* insertion order */
	struct entry *older, *newer; /* writer-only FIFO */
	struct entry *id_next;       /* writer-only id index */
	size_t nnodes;
	struct node *nodes[];
};

struct stripe {
	_Alignas(64) _Atomic long readers[2];
};

struct tsec_certcache {
	_Alignas(64) _Atomic unsigned epoch;
	struct stripe stripes[STRIPES];
	_Alignas(64) pthread_mutex_t wlock;
	_Atomic(struct node *) *buckets;
	size_t mask;
	struct entry **ids;          /* writer-only, same size as buckets */
	struct entry *oldest, *newest;
	size_t count, capacity;
	uint64_t seq;
	struct entry **heap;         /* writer-only, by not_after */
	_Atomic size_t multi_wild;   /* names starting "*.*" */
	int64_t (*clock)(void);      /* unix seconds */
	void (*free_data)(void *);
	struct tsec__fails fails;    /* writer-only (certcache_fails.c) */
	struct tsec__follow *follow; /* tsec_certcache_follow's, or NULL */
};

struct tsec__follow **tsec__certcache_follow_slot(struct tsec_certcache *c)
{
	return &c->follow;
}

static int64_t wall_s(void);

static _Atomic unsigned next_stripe;
static _Thread_local int my_stripe = -1;

static unsigned stripe_of_thread(void)
{
	if (my_stripe < 0)
		my_stripe = (int)(atomic_fetch_add(&next_stripe, 1) % STRIPES);
	return (unsigned)my_stripe;
}

unsigned tsec_certcache_read_begin(struct tsec_certcache *c)
{
	unsigned s = stripe_of_thread();

	for (;;) {
		unsigned e = atomic_load(&c->epoch);
		atomic_fetch_add(&c->stripes[s].readers[e & 1], 1);
		if (atomic_load(&c->epoch) == e)
			return (s << 1) | (e & 1);
		atomic_fetch_sub(&c->stripes[s].readers[e & 1], 1);
	}
}

void tsec_certcache_read_end(struct tsec_certcache *c, unsigned token)
{
	atomic_fetch_sub_explicit(&c->stripes[token >> 1].readers[token & 1], 1,
				  memory_order_release);
}

/* Writer, under wlock: waits until no reader can see unlinked memory. */
static void synchronize(struct tsec_certcache *c)
{
	unsigned e = atomic_fetch_add(&c->epoch, 1);

	for (unsigned s = 0; s < STRIPES; s++)
		while (atomic_load_explicit(&c->stripes[s].readers[e & 1],
					    memory_order_acquire))
			sched_yield();
}

/*
 * Names hash from their last byte to their first (FNV-1a), so that the
 * hash of a wildcard candidate "*" + suffix continues the suffix's state,
 * which the exact name's hash passes through: one step instead of a pass.
 */
#define HASH_SEED 0xcbf29ce484222325ull

static inline uint64_t hash_step(uint64_t h, unsigned char c)
{
	return (h ^ c) * 0x100000001b3ull;
}

static inline uint64_t hash_final(uint64_t h)
{
	return h ^ (h >> 31);
}

static uint64_t hash_name(const char *p, size_t n)
{
	uint64_t h = HASH_SEED;
	while (n--)
		h = hash_step(h, (unsigned char)p[n]);
	return hash_final(h);
}

static size_t id_slot(const struct tsec_certcache *c, const uint8_t id[32])
{
	uint64_t h;
	memcpy(&h, id, sizeof(h));
	return (size_t)h & c->mask;
}

int tsec_certcache_new(struct tsec_certcache **out, size_t capacity,
		       void (*free_data)(void *))
{
	struct tsec_certcache *c;
	size_t nb = 64;

	*out = NULL;
	if (capacity == 0 || capacity > (1u << 24))
		return TSEC_EINVAL;
	while (nb < capacity * 4)
		nb *= 2;
	if (posix_memalign((void **)&c, 64, sizeof(*c)))
		return TSEC_ENOMEM;
	memset(c, 0, sizeof(*c));
	c->buckets = calloc(nb, sizeof(*c->buckets));
	c->ids = calloc(nb, sizeof(*c->ids));
	c->heap = calloc(capacity, sizeof(*c->heap));
	if (!c->buckets || !c->ids || !c->heap || tsec__fails_init(&c->fails, nb, capacity)) {
		free(c->buckets);
		free(c->ids);
		free(c->heap);
		free(c);
		return TSEC_ENOMEM;
	}
	c->clock = wall_s;
	c->mask = nb - 1;
	c->capacity = capacity;
	c->free_data = free_data;
	atomic_init(&c->epoch, 0);
	pthread_mutex_init(&c->wlock, NULL);
	*out = c;
	return 0;
}

static void entry_free(struct tsec_certcache *c, struct entry *e)
{
	for (size_t i = 0; i < e->nnodes; i++)
		free(e->nodes[i]);
	if (c->free_data && e->data)
		c->free_data(e->data);
	free(e);
}

void tsec_certcache_free(struct tsec_certcache **pc)
{
	struct tsec_certcache *c;
	struct entry *e, *next;

	if (!pc || !*pc)
		return;
	c = *pc;
	tsec_certcache_unfollow(c);
	for (e = c->oldest; e; e = next) {
		next = e->newer;
		entry_free(c, e);
	}
	tsec__fails_fini(&c->fails);
	pthread_mutex_destroy(&c->wlock);
	free(c->buckets);
	free(c->ids);
	free(c->heap);
	free(c);
	*pc = NULL;
}

static struct entry *find_id(struct tsec_certcache *c, const uint8_t id[32],
			     struct entry ***link)
{
	struct entry **pp = &c->ids[id_slot(c, id)];

	for (; *pp; pp = &(*pp)->id_next)
		if (memcmp((*pp)->id, id, 32) == 0)
			break;
	if (link)
		*link = pp;
	return *pp;
}

static bool multi_wild(const char *n)
{
	return n[0] == '*' && n[1] == '.' && n[2] == '*';
}

/* ---- the expiry heap (writer-only) ---- */

static void heap_set(struct tsec_certcache *c, size_t i, struct entry *e)
{
	c->heap[i] = e;
	e->heap_at = i;
}

static void heap_up(struct tsec_certcache *c, size_t i)
{
	struct entry *e = c->heap[i];

	while (i > 0 && c->heap[(i - 1) / 2]->not_after > e->not_after) {
		heap_set(c, i, c->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(c, i, e);
}

static void heap_down(struct tsec_certcache *c, size_t i)
{
	struct entry *e = c->heap[i];

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		int64_t best = e->not_after;
		if (l < c->count && c->heap[l]->not_after < best)
			m = l, best = c->heap[l]->not_after;
		if (l + 1 < c->count && c->heap[l + 1]->not_after < best)
			m = l + 1;
		if (m == i)
			break;
		heap_set(c, i, c->heap[m]);
		i = m;
	}
	heap_set(c, i, e);
}

/* Removes e from the heap; c->count still counts it. */
static void heap_remove(struct tsec_certcache *c, struct entry *e)
{
	size_t i = e->heap_at, last = c->count - 1;

	if (i != last) {
		heap_set(c, i, c->heap[last]);
		heap_down(c, i);
		heap_up(c, c->heap[i]->heap_at);
	}
}

static int64_t wall_s(void)
{
	return (int64_t)time(NULL);
}

/* Writer: unlinks an entry from every index; the caller synchronises. */
static void unlink_entry(struct tsec_certcache *c, struct entry *e)
{
	struct entry **link;

	for (size_t i = 0; i < e->nnodes; i++) {
		struct node *n = e->nodes[i];
		_Atomic(struct node *) *pp = &c->buckets[n->hash & c->mask];
		struct node *cur;
		while ((cur = atomic_load_explicit(pp, memory_order_relaxed)) && cur != n)
			pp = &cur->next;
		if (cur)
			atomic_store_explicit(pp, atomic_load_explicit(&n->next, memory_order_relaxed),
					      memory_order_release);
		if (multi_wild(n->name))
			atomic_fetch_sub(&c->multi_wild, 1);
	}
	heap_remove(c, e);
	if (find_id(c, e->id, &link))
		*link = e->id_next;
	if (e->older)
		e->older->newer = e->newer;
	else
		c->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		c->newest = e->older;
	c->count--;
}

/* A fully qualified name's one trailing dot names the same host. */
static size_t name_len(const char *in)
{
	size_t n = strnlen(in, NAME_MAX_LEN + 2);

	return n > 1 && in[n - 1] == '.' ? n - 1 : n;
}

static int lower_name(const char *in, char *out)
{
	size_t n = name_len(in);

	if (n == 0 || n > NAME_MAX_LEN)
		return -1;
	for (size_t i = 0; i < n; i++)
		out[i] = (in[i] >= 'A' && in[i] <= 'Z') ? (char)(in[i] + 32) : in[i];
	out[n] = '\0';
	return (int)n;
}

static struct entry *reclaim(struct tsec_certcache *c);

/* Frees a chain of unlinked entries (through newer), after synchronize. */
static void free_chain(struct tsec_certcache *c, struct entry *e)
{
	struct entry *next;

	for (; e; e = next) {
		next = e->newer;
		entry_free(c, e);
	}
}

/* ---- failure backoff (certcache_fails.c), under wlock ---- */

enum fails_op { FAILED, ASKED, SUCCEEDED };

/* The name lower-cased and hashed, then op on the table under wlock: its
 * result, or TSEC_EINVAL for no name. */
static int fails_do(struct tsec_certcache *c, const char *name, enum fails_op op,
		    struct tsec_cert_failure *out)
{
	char low[NAME_MAX_LEN + 1];
	int n = c && name ? lower_name(name, low) : -1, rc = 0;
	uint64_t h;

	if (n < 0)
		return TSEC_EINVAL;
	h = hash_name(low, (size_t)n);
	pthread_mutex_lock(&c->wlock);
	if (op == FAILED)
		rc = tsec__fails_add(&c->fails, low, (size_t)n, h, c->clock(), out);
	else if (op == ASKED)
		rc = tsec__fails_get(&c->fails, low, (size_t)n, h, out);
	else
		tsec__fails_drop(&c->fails, low, (size_t)n, h);
	pthread_mutex_unlock(&c->wlock);
	return rc;
}

int tsec_certcache_failed(struct tsec_certcache *c, const char *name,
			  struct tsec_cert_failure *out)
{
	return fails_do(c, name, FAILED, out);
}

int tsec_certcache_failure(struct tsec_certcache *c, const char *name,
			   struct tsec_cert_failure *out)
{
	return fails_do(c, name, ASKED, out);
}

void tsec_certcache_succeeded(struct tsec_certcache *c, const char *name)
{
	fails_do(c, name, SUCCEEDED, NULL);
}

size_t tsec_certcache_snapshot(struct tsec_certcache *c,
			       int (*each)(void *arg, const struct tsec_cert_entry *e),
			       void *arg)
{
	struct entry *e, *gone;
	size_t n = 0;

	if (!c || !each)
		return 0;
	pthread_mutex_lock(&c->wlock);
	gone = reclaim(c);
	for (e = c->oldest; e; e = e->newer) {
		const char *names[NAMES_MAX];
		struct tsec_cert_entry ce;

		for (size_t i = 0; i < e->nnodes; i++)
			names[i] = e->nodes[i]->name;
		memcpy(ce.id, e->id, 32);
		ce.data = e->data;
		ce.not_after = e->not_after;
		ce.names = names;
		ce.nnames = e->nnodes;
		n++;
		if (each(arg, &ce))
			break;
	}
	if (gone)
		synchronize(c);
	pthread_mutex_unlock(&c->wlock);
	free_chain(c, gone);
	return n;
}


/* A new entry of the names (lower-cased, each once; unusable ones
 * skipped): NULL with err set when none is usable or memory is out. */
static struct entry *entry_new(struct tsec_certcache *c, const uint8_t id[32],
			       const char *const *names, size_t nnames, int64_t not_after,
			       void *data, struct tsec_error *err)
{
	struct entry *e = calloc(1, sizeof(*e) + nnames * sizeof(e->nodes[0]));

	if (!e) {
		tsec__seterr(err, TSEC_ENOMEM, "", NULL);
		return NULL;
	}
	memcpy(e->id, id, 32);
	e->not_after = not_after;
	for (size_t i = 0; i < nnames; i++) {
		char low[NAME_MAX_LEN + 1];
		int n = names[i] ? lower_name(names[i], low) : -1;
		struct node *nd;
		bool dup = false;

		if (n < 0)
			continue;
		for (size_t j = 0; j < e->nnodes && !dup; j++)
			dup = strcmp(e->nodes[j]->name, low) == 0;
		if (dup)
			continue;
		if (!(nd = malloc(sizeof(*nd) + (size_t)n + 1))) {
			entry_free(c, e);
			tsec__seterr(err, TSEC_ENOMEM, "", NULL);
			return NULL;
		}
		memcpy(nd->name, low, (size_t)n + 1);
		nd->len = (uint32_t)n;
		nd->hash = hash_name(low, (size_t)n);
		nd->e = e;
		atomic_init(&nd->next, NULL);
		e->nodes[e->nnodes++] = nd;
	}
	if (e->nnodes == 0) {
		entry_free(c, e);
		tsec__seterr(err, TSEC_ECERT, "", "no usable name");
		return NULL;
	}
	e->data = data;              /* the caller's only once it is taken */
	return e;
}

/* Under c->wlock: e in every index (names at their chains' tails, so
 * older entries match first; the id table; the age list; the heap). */
static void entry_link(struct tsec_certcache *c, struct entry *e)
{
	e->seq = ++c->seq;
	for (size_t i = 0; i < e->nnodes; i++) {
		struct node *n = e->nodes[i], *cur;
		_Atomic(struct node *) *pp = &c->buckets[n->hash & c->mask];

		while ((cur = atomic_load_explicit(pp, memory_order_relaxed)))
			pp = &cur->next;
		atomic_store_explicit(pp, n, memory_order_release);
		if (multi_wild(n->name))
			atomic_fetch_add(&c->multi_wild, 1);
	}
	e->id_next = c->ids[id_slot(c, e->id)];
	c->ids[id_slot(c, e->id)] = e;
	e->older = c->newest;
	if (c->newest)
		c->newest->newer = e;
	else
		c->oldest = e;
	c->newest = e;
	c->count++;
	heap_set(c, c->count - 1, e);
	heap_up(c, c->count - 1);
}

int tsec_certcache_insert_names(struct tsec_certcache *c, const uint8_t id[32],
				const char *const *names, size_t nnames,
				int64_t not_after, void *data,
				struct tsec_error *err)
{
	struct entry *e, *evict = NULL;

	if (!c || !id || !names || nnames == 0 || nnames > NAMES_MAX)
		return tsec__seterr(err, TSEC_EINVAL, "", "a certificate needs 1-%d names", NAMES_MAX);
	if (!(e = entry_new(c, id, names, nnames, not_after, data, err)))
		return err->code;
	pthread_mutex_lock(&c->wlock);
	if (find_id(c, id, NULL)) {
		pthread_mutex_unlock(&c->wlock);
		e->data = NULL;
		entry_free(c, e);
		return tsec__seterr(err, TSEC_EEXIST, "", "certificate already cached");
	}
	/* Every expired entry goes (each O(log n) off the heap), then, if
	 * the cache is still full, the oldest live one. */
	evict = reclaim(c);
	if (c->count == c->capacity) {
		struct entry *old = c->oldest;

		unlink_entry(c, old);
		old->newer = evict;
		evict = old;
	}
	/* A certificate for a name ends its failures in a row. */
	for (size_t i = 0; i < e->nnodes; i++)
		tsec__fails_drop(&c->fails, e->nodes[i]->name, e->nodes[i]->len, e->nodes[i]->hash);
	entry_link(c, e);
	if (evict)
		synchronize(c);
	pthread_mutex_unlock(&c->wlock);
	free_chain(c, evict);
	return 0;
}

int tsec_certcache_remove(struct tsec_certcache *c, const uint8_t id[32])
{
	struct entry *e;

	pthread_mutex_lock(&c->wlock);
	e = find_id(c, id, NULL);
	if (!e) {
		pthread_mutex_unlock(&c->wlock);
		return TSEC_ENOENT;
	}
	unlink_entry(c, e);
	synchronize(c);
	pthread_mutex_unlock(&c->wlock);
	entry_free(c, e);
	return 0;
}

/*
 * Unlinks every expired entry (the heap's top while it has expired) onto
 * *gone; the caller synchronises, then frees them.  Under wlock.
 */
static struct entry *reclaim(struct tsec_certcache *c)
{
	struct entry *gone = NULL, *e;
	int64_t now = c->clock();

	while (c->count && (e = c->heap[0])->not_after <= now) {
		unlink_entry(c, e);
		e->newer = gone;
		gone = e;
	}
	return gone;
}

size_t tsec_certcache_count(struct tsec_certcache *c)
{
	struct entry *gone;
	size_t n;

	if (!c)
		return 0;
	pthread_mutex_lock(&c->wlock);
	gone = reclaim(c);
	n = c->count;
	if (gone)
		synchronize(c);
	pthread_mutex_unlock(&c->wlock);
	free_chain(c, gone);
	return n;
}

void tsec_certcache_set_clock(struct tsec_certcache *c, int64_t (*now)(void))
{
	if (c)
		c->clock = now ? now : wall_s;
}

/*
 * Collects the live entries named exactly k "*" labels ("*", "*.*", ...;
 * k = 0: none) followed by suffix[0..n) (lower case; with k > 0 it starts
 * with its '.'), hash h, into out; compared in place, so a miss builds no
 * string.
 */
static size_t scan(struct tsec_certcache *c, size_t k, const char *suffix, size_t n,
		   uint64_t h, int64_t now, struct tsec_cert_match *out, size_t max,
		   size_t got, bool first_only)
{
	struct node *nd = atomic_load_explicit(&c->buckets[h & c->mask],
					       memory_order_acquire);
	size_t stars = k ? 2 * k - 1 : 0;

	for (; nd; nd = atomic_load_explicit(&nd->next, memory_order_acquire)) {
		size_t i;
		if (nd->hash != h || nd->len != stars + n)
			continue;
		for (i = 0; i < stars && nd->name[i] == (i % 2 ? '.' : '*'); i++)
			;
		if (i < stars || memcmp(nd->name + stars, suffix, n) != 0)
			continue;
		if (nd->e->not_after <= now)
			continue; /* expired: never served */
		if (first_only) {
			/* The latest to expire (issue 50: the oldest inserted). */
			if (!got || nd->e->not_after > out[0].not_after) {
				memcpy(out[0].id, nd->e->id, 32);
				out[0].data = nd->e->data;
				out[0].not_after = nd->e->not_after;
			}
			got = 1;
			continue;
		}
		if (got < max) {
			memcpy(out[got].id, nd->e->id, 32);
			out[got].data = nd->e->data;
			out[got].not_after = nd->e->not_after;
		}
		got++;
	}
	return got;
}

#define MAX_LABELS 127

/*
 * The name, then each progressive wildcard candidate.  Names hash from
 * their last byte to their first, so candidate k's hash continues the
 * state the backward pass had at the k-th dot: no candidate is built.
 */
static size_t lookup(struct tsec_certcache *c, const char *name,
		     struct tsec_cert_match *out, size_t max, bool first_only)
{
	char low[NAME_MAX_LEN + 1];
	size_t got = 0, n, ndots = 0, dots[MAX_LABELS];
	uint64_t h = HASH_SEED, at[MAX_LABELS];
	int64_t now;
	unsigned tok;

	if (!c || !name)
		return 0;
	n = name_len(name);
	if (n == 0 || n > NAME_MAX_LEN)
		return 0;
	/* One backward pass: lower case, hash, and the state at each dot. */
	for (size_t i = n; i-- > 0;) {
		char ch = name[i];
		if (ch >= 'A' && ch <= 'Z')
			ch = (char)(ch + 32);
		low[i] = ch;
		h = hash_step(h, (unsigned char)ch);
		if (ch == '.' && ndots < MAX_LABELS) {
			dots[ndots] = i;     /* right to left */
			at[ndots++] = h;     /* state after low[i..n) */
		}
	}
	low[n] = '\0';
	now = c->clock();
	tok = tsec_certcache_read_begin(c);
	got = scan(c, 0, low, n, hash_final(h), now, out, max, 0, first_only);
	/* Candidate k replaces the k leftmost labels: its suffix starts at
	 * the k-th dot from the left, dots[ndots - k]. */
	for (size_t k = 1; k <= ndots && !(first_only && got); k++) {
		size_t d = dots[ndots - k];
		uint64_t hk = at[ndots - k];
		if (d == 0 || low[d - 1] == '.')
			break; /* an empty label: no candidate */
		if (k > 1 && !atomic_load_explicit(&c->multi_wild, memory_order_relaxed))
			break;
		hk = hash_step(hk, '*');
		for (size_t j = 1; j < k; j++)
			hk = hash_step(hash_step(hk, '.'), '*');
		got = scan(c, k, low + d, n - d, hash_final(hk), now, out, max, got, first_only);
	}
	tsec_certcache_read_end(c, tok);
	return got;
}

int tsec_certcache_lookup(struct tsec_certcache *c, const char *name,
			  struct tsec_cert_match *out)
{
	return lookup(c, name, out, 1, true) ? 0 : TSEC_ENOENT;
}

size_t tsec_certcache_lookup_all(struct tsec_certcache *c, const char *name,
				 struct tsec_cert_match *out, size_t max)
{
	return lookup(c, name, out, max, false);
}
