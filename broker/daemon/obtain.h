/*
 * tsec-broker: cert.obtain, the on-demand TLS decision (obtain.c), for
 * the method, the ask listener (ask.c) and the policy's loading.
 */
#ifndef TSEC_DAEMON_OBTAIN_H
#define TSEC_DAEMON_OBTAIN_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "tinysecurity/types.h"

struct tsec__daemon;
struct tsec__call;
struct tsec_error;

/* One rule's bound: at most max names new to it in any window_s. */
struct tsec__obtain_limit {
	char id[TSEC_ID_MAX];
	uint32_t max, window_s;
};

/* The answer to one ask, as the log and every way of asking show it. */
struct tsec__obtained {
	struct tsec_decision dec;    /* allow, or why not */
	char name[256];              /* the name as read ("example.com") */
	char resource[264];          /* what the policy was asked about */
	char suffix[256];            /* the registrable domain counted under */
	char reason[TSEC_DETAIL_MAX];
	int rated;                   /* a rate counted this ask */
	int fresh;                   /* the name was new to the count */
	uint32_t used, max, window_s;   /* of the rate that decided */
	char limit_rule[TSEC_ID_MAX];
};

/* The rates a policy's text sets (new; the text compiled already). */
struct tsec__obtain_limits *tsec__obtain_limits_of(const char *text, size_t len);
/* Makes l the running policy's (the old ones freed). */
void tsec__obtain_limits_set(struct tsec__daemon *d, struct tsec__obtain_limits *l);

/* Reads a name into o (name, resource, suffix); TSEC_EINVAL with
 * o->reason for one that is no host name or IP address. */
int tsec__obtain_name(struct tsec__daemon *d, const char *in, size_t n,
		      struct tsec__obtained *o);

/*
 * Decides name[0..n) for c's caller, counts it unless dry, and logs the
 * decision.  now_s: the clock (0: the broker's).  0 with o filled (allow
 * or deny), or an error (a count that could not be read or written:
 * o is a deny saying so).
 */
int tsec__obtain(struct tsec__daemon *d, struct tsec__call *c, const char *name, size_t n,
		 bool dry, int64_t now_s, struct tsec__obtained *o, struct tsec_error *err);

/*
 * A count's record text (NULL: none yet) read: its names still inside
 * keep_s of now, as a JSON array of [name, unix seconds] (new); NULL with
 * why for one that is not principal's and suffix's or does not read.
 */
json_t *tsec__obtain_record_read(const char *text, size_t len, const char *principal,
				 const char *suffix, int64_t now, uint32_t keep_s, const char **why);

/* o as the method's result. */
json_t *tsec__obtained_json(const struct tsec__obtained *o);

#endif
