/*
 * Per-key gates: a fixed table of mutexes, a key's gate chosen by a hash
 * of its normalised text.  Nothing is allocated per operation (groups of
 * up to 8 keys), and a group takes its gates in ascending order, each
 * once, so two groups that overlap in any order serialise and cannot
 * deadlock, while disjoint ones run in parallel (unless two keys share a
 * gate, one chance in TSEC__GATES).
 */
#include <stdlib.h>
#include <string.h>

#include "broker/storage/backend.h"
#include "broker/storage/gates.h"

void tsec__gates_init(struct tsec__gates *g)
{
	for (size_t i = 0; i < TSEC__GATES; i++)
		pthread_mutex_init(&g->m[i], NULL);
}

void tsec__gates_destroy(struct tsec__gates *g)
{
	for (size_t i = 0; i < TSEC__GATES; i++)
		pthread_mutex_destroy(&g->m[i]);
}

uint16_t tsec__gate_of(const char *key)
{
	return (uint16_t)(tsec__strhash(key, strlen(key)) % TSEC__GATES);
}

static int cmp_u16(const void *a, const void *b)
{
	return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

int tsec__gates_lock(struct tsec__gates *g, const char *const *keys, size_t n,
		     struct tsec__gateset *set)
{
	size_t k = 0;

	memset(set, 0, sizeof(*set));
	if (n == (size_t)-1) {
		set->all = true;
		for (size_t i = 0; i < TSEC__GATES; i++)
			pthread_mutex_lock(&g->m[i]);
		return 0;
	}
	set->v = n <= 8 ? set->idx : malloc(n * sizeof(*set->v));
	if (!set->v)
		return TSEC_ENOMEM;
	for (size_t i = 0; i < n; i++)
		set->v[i] = tsec__gate_of(keys[i]);
	if (n > 8) {
		qsort(set->v, n, sizeof(*set->v), cmp_u16);
	} else {
		/* A certificate's three files, a move's two ends: in place. */
		for (size_t i = 1; i < n; i++) {
			uint16_t x = set->v[i];
			size_t j = i;
			for (; j > 0 && set->v[j - 1] > x; j--)
				set->v[j] = set->v[j - 1];
			set->v[j] = x;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (k == 0 || set->v[k - 1] != set->v[i])
			set->v[k++] = set->v[i];
	set->n = k;
	for (size_t i = 0; i < k; i++)
		pthread_mutex_lock(&g->m[set->v[i]]);
	return 0;
}

void tsec__gates_unlock(struct tsec__gates *g, struct tsec__gateset *set)
{
	if (set->all) {
		for (size_t i = TSEC__GATES; i-- > 0;)
			pthread_mutex_unlock(&g->m[i]);
	} else {
		for (size_t i = set->n; i-- > 0;)
			pthread_mutex_unlock(&g->m[set->v[i]]);
		if (set->v != set->idx)
			free(set->v);
	}
	set->n = 0;
	set->all = false;
}
