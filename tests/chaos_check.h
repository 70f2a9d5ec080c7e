/*
 * The chaos suite's history checker (tests/chaos_check.c): a recorded
 * history of lock grants, renewals, releases, fenced writes and reads,
 * one lock guarding one key each, checked afterwards the way Knossos and
 * Porcupine check theirs (learnt from, none of their code here):
 *
 *   - grants: no fence granted twice, fences rise, and no grant answered
 *     while the previous holder's lease was valid (two holders);
 *   - fenced writes: no accepted write below a fence already written, and
 *     none from a holder that no longer held the lock (it had released it,
 *     or a newer grant was answered before the write was asked for);
 *   - reads, by name: every value read was written, by a write that was
 *     not refused and was asked for before the read answered; no read
 *     older than an acknowledged write finished before it began (less
 *     the LocalCache's staleness bound), none older than one read before
 *     it, no "not found" after an acknowledged write;
 *   - and the whole of each key's history: some order of its writes
 *     (acknowledged ones, and those of unknown outcome that were read)
 *     and reads, each within its own interval (a read's begins the
 *     staleness bound early), in which every read returns the last
 *     write's value: linearizability of a register, searched with
 *     memoised backtracking (Wing and Gong, Lowe's refinement).
 *
 * Values are unique ("FENCE:WORKER:SEQ"), so a read says which write it
 * saw.  A write refused (not_owner, busy, ...) never took effect; one of
 * unknown outcome (no answer) may have, at any time after it was asked.
 */
#ifndef TSEC_TESTS_CHAOS_CHECK_H
#define TSEC_TESTS_CHAOS_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum chaos_kind { CH_ACQ, CH_PUT, CH_GET, CH_RENEW, CH_REL };

struct chaos_event {
	enum chaos_kind kind;
	int worker, lock, rc;
	int64_t inv, ok;             /* monotonic ms: invoked, answered */
	uint64_t fence;              /* ACQ: granted; PUT: the handle's and its value's;
					GET: the value read's (0 with vseq 0: none) */
	uint8_t token[16];           /* ACQ, PUT, RENEW, REL: the lock handle's */
	int vworker;                 /* PUT: its value's writer; GET: the value read's */
	uint32_t vseq;               /* PUT: its value's number (from 1); GET: 0 for none */
};

/* The names a violation is reported by (the first seen is returned). */
#define CH_TWICE       "one fence granted twice"
#define CH_OVERLAP     "a grant while the previous holder's lease was valid"
#define CH_GRANT_BACK  "a grant below a fence already granted"
#define CH_WRITE_BACK  "a fenced write accepted below a fence already written"
#define CH_STALE_WRITE "a write accepted from a holder that no longer held the lock"
#define CH_PHANTOM     "a read of a value never written"
#define CH_REFUSED     "a read of a write that was refused"
#define CH_EARLY       "a read of a value before it was written"
#define CH_OLD_READ    "a read older than an acknowledged write"
#define CH_LOST        "an acknowledged write lost (the value is gone)"
#define CH_BACKWARDS   "a read older than one read before it"
#define CH_NOT_LINEAR  "no order of the writes and reads fits (not linearizable)"

struct chaos_report {
	const char *first;           /* the first violation's name, or NULL */
	long violations;
	long linear_steps;           /* the search's work, all keys */
	bool gave_up;                /* a key's search passed its step bound */
};

/*
 * Checks ev[0..n) (sorted or not; reordered) of `locks` locks, each lease
 * ttl_ms long, reads allowed stale_ms behind (0 without a LocalCache).
 * say(fmt, ...) is told each of the first violations (NULL: quiet).
 */
void chaos_check(struct chaos_event *ev, size_t n, int locks, int64_t ttl_ms, int64_t stale_ms,
		 void (*say)(const char *what, const struct chaos_event *a,
			     const struct chaos_event *b),
		 struct chaos_report *out);

/* Whether a write answered rc surely took no effect (refused). */
bool chaos_refused(int rc);

#endif
