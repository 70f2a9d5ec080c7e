/*
 * Internal: the exact comparison of two policies (`tsec diff`, and the
 * property test that holds it to brute force).
 *
 * A key pattern is a regular language over a key's characters, and so is
 * a rule's domain list read off the key: every resource and domain
 * pattern of both policies is compiled into one automaton, and a walk of
 * the subsets of its states, shortest keys first, finds every class of
 * keys that the patterns tell apart (which patterns a key matches), each
 * with its shortest key.  The other request fields fall into finitely
 * many classes: the principals and roles the rules on those keys name and
 * one other, every action, and for each condition bound `when` sets (ttl
 * and size: the bound and one past it; recursive or not).  Every class of
 * the product is decided by both policies through the module itself, so
 * a difference reported is one the module makes, and none reported means
 * none exists among these requests.  A move is decided at both ends, so
 * its classes are pairs of key classes.
 *
 * Where a rule with a `cert` condition applies, the certificate is one
 * more field, with finitely many classes too: one that does not parse,
 * and self-signed ones naming the key's domain or not, with notAfter
 * either side of each min_remaining_s bound, with each key type the
 * module knows and RSA either side of each min_rsa_bits bound (made by
 * tsec__certinfo_pem).  Not exact (exact = false): more than max_states
 * subsets, or more than 6 roles on one class.
 */
#ifndef TSEC_BROKER_POLICYTEST_DIFF_H
#define TSEC_BROKER_POLICYTEST_DIFF_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "tinysecurity/bus.h"
#include "tinysecurity/types.h"

struct tsec__diff_stats {
	size_t states;               /* subsets of automaton states walked */
	size_t key_classes;          /* classes of keys the patterns tell apart */
	size_t asked;                /* requests decided under both */
	size_t differ;               /* of which decided differently */
	size_t cert_rules;           /* rules with a cert condition */
	bool exact;                  /* false: bounds cut the walk short */
};

/* One request decided differently: the request (as the wire takes it)
 * and both decisions. */
typedef void (*tsec__diff_fn)(void *ctx, json_t *request, const struct tsec_decision *a,
			      const struct tsec_decision *b);

/*
 * Compares policy documents pa and pb, compiled on buses a and b (the
 * "policy" endpoint of each); calls fn for every class that differs, with
 * its shortest request.  max_states bounds the walk (0: 4,000,000).  0, or
 * TSEC_ENOMEM / an error of the bus, with err.
 */
int tsec__policy_diff(struct tsec_bus *a, struct tsec_bus *b, json_t *pa, json_t *pb,
		      size_t max_states, tsec__diff_fn fn, void *ctx,
		      struct tsec__diff_stats *st, struct tsec_error *err);

#endif
