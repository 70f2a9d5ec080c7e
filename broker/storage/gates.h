/*
 * Internal: per-key gates (gates.c), the mutexes the store and the
 * LocalCache take around a key's operations, always in one order.
 */
#ifndef TSEC_STORAGE_GATES_H
#define TSEC_STORAGE_GATES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TSEC__GATES 1024

struct tsec__gates {
	pthread_mutex_t m[TSEC__GATES];
};

void tsec__gates_init(struct tsec__gates *g);
void tsec__gates_destroy(struct tsec__gates *g);

/* A set of gates to hold together, in one canonical (ascending) order. */
struct tsec__gateset {
	uint16_t idx[8];
	uint16_t *v;                 /* idx or a larger allocation */
	size_t n;
	bool all;                    /* every gate (a prefix barrier) */
};

/* The gate of one normalised key. */
uint16_t tsec__gate_of(const char *key);

/*
 * Takes the gates of keys[0..n) (sorted, each once), or every gate when
 * n is (size_t)-1, so reversed or aliased groups cannot deadlock.
 * TSEC_ENOMEM only for groups of more than 8 keys.
 */
int tsec__gates_lock(struct tsec__gates *g, const char *const *keys, size_t n,
		     struct tsec__gateset *set);
void tsec__gates_unlock(struct tsec__gates *g, struct tsec__gateset *set);

#endif
