/*
 * The remote store's memory of the highest generation record sequence
 * this process has seen per certificate (remote_cert.c refuses one that
 * goes back; remote_recover.c accepts a restore past it).
 */
#include <string.h>

#include "broker/remote/remote_private.h"

/* The most certificates whose records this process remembers. */
#define HW_MAX (1u << 20)

static uint8_t hw_key[crypto_shorthash_KEYBYTES];
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_key_init(void)
{
	randombytes_buf(hw_key, sizeof(hw_key));
}

/* Keyed with a secret of this process: a tenant cannot choose a name
 * whose slot is another certificate's. */
static uint64_t hw_hash(const char *key)
{
	uint8_t h[crypto_shorthash_BYTES];
	uint64_t v = 0;

	pthread_once(&hw_once, hw_key_init);
	crypto_shorthash(h, (const uint8_t *)key, strlen(key), hw_key);
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)h[i] << (8 * i);
	return v ? v : 1;
}

/* The slot of h in a table of cap (a power of two). */
static struct tsec__hw *hw_slot(struct tsec__hw *t, size_t cap, uint64_t h)
{
	for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
		if (t[i].h == h || t[i].h == 0)
			return &t[i];
}

/*
 * Whether seq, read by a read that began at epoch `since`, is below the
 * highest this process had seen for key when that read began (1: the
 * record went back).  A mark raised after the read began says nothing
 * about it: another thread's publish may have landed meanwhile.  With
 * `raise`, remembers seq when it is higher.
 */
int tsec__hw_seen(struct tsec_remote *r, const char *key, uint64_t seq, uint64_t since,
		   bool raise)
{
	uint64_t h = hw_hash(key);
	struct tsec__hw *e;
	int back = 0;

	pthread_mutex_lock(&r->hw_mu);
	if (r->hw_n * 4 >= r->hw_cap * 3 && r->hw_cap < HW_MAX) {
		size_t cap = r->hw_cap ? 2 * r->hw_cap : 256;
		struct tsec__hw *t = calloc(cap, sizeof(*t));
		if (t) {
			for (size_t i = 0; i < r->hw_cap; i++)
				if (r->hw[i].h)
					*hw_slot(t, cap, r->hw[i].h) = r->hw[i];
			free(r->hw);
			r->hw = t;
			r->hw_cap = cap;
		}
	}
	if (r->hw_cap && (e = hw_slot(r->hw, r->hw_cap, h)) != NULL) {
		if (e->h == h) {
			back = seq < e->seq && e->epoch <= since;
			if (raise && seq > e->seq) {
				e->seq = seq;
				e->epoch = atomic_fetch_add(&r->hw_epoch, 1) + 1;
			}
		} else if (raise && r->hw_n * 4 < r->hw_cap * 3) {
			e->h = h;
			e->seq = seq;
			e->epoch = atomic_fetch_add(&r->hw_epoch, 1) + 1;
			r->hw_n++;
		}
	}
	pthread_mutex_unlock(&r->hw_mu);
	return back;
}

void tsec__remote_forget_seen(struct tsec_remote *r)
{
	pthread_mutex_lock(&r->hw_mu);
	if (r->hw)
		memset(r->hw, 0, r->hw_cap * sizeof(*r->hw));
	r->hw_n = 0;
	pthread_mutex_unlock(&r->hw_mu);
}


uint64_t tsec__hw_get(struct tsec_remote *r, const char *key)
{
	uint64_t h = hw_hash(key), seq = 0;
	struct tsec__hw *e;

	pthread_mutex_lock(&r->hw_mu);
	if (r->hw_cap && (e = hw_slot(r->hw, r->hw_cap, h)) != NULL && e->h == h)
		seq = e->seq;
	pthread_mutex_unlock(&r->hw_mu);
	return seq;
}
