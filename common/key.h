/*
 * Internal: storage keys, validated by the key rules (docs/policy.md), with the
 * attributes derived from certmagic's layout.  Compiled into both the
 * module and the broker, so that the key the policy judges and the path
 * the store touches come from one reading of the key.
 */
#ifndef TSEC_COMMON_KEY_H
#define TSEC_COMMON_KEY_H

#include <stdbool.h>

#include "tinysecurity/types.h"


/*
 * A parsed, validated key: segments point into the caller's buffer, which
 * must outlive the struct.  Derived attributes follow the certmagic
 * layout.  issuer_seg/domain_seg are segment indexes or -1.
 */
struct tsec__key {
	const char *base;
	uint16_t nseg;
	uint16_t off[TSEC_KEY_SEGMENTS];
	uint16_t len[TSEC_KEY_SEGMENTS];
	uint8_t kind;                /* enum tsec_kind */
	int8_t issuer_seg;
	int8_t domain_seg;
	uint8_t domain_wild;         /* domain segment starts with wildcard_ */
	uint8_t derived;             /* kind, issuer and domain are set */
	uint8_t normal;              /* the text is its own normal form */
	uint16_t tlen;               /* bytes of text read */
};

#define TSEC__WILDCARD_PREFIX "wildcard_"
#define TSEC__WILDCARD_PREFIX_LEN 9

/*
 * Whether k, parsed from len bytes, is its own normal form: its segments
 * cover the text with one '/' between each (no empty or "." segment, no
 * '/' at either end), so the text needs no key_format.
 */
bool tsec__key_is_normal(const struct tsec__key *k, size_t len);

/*
 * Validates key p[0..n) by the key rules and fills *k.  allow_root lets
 * a key reduce to the root (lists only).  On failure returns TSEC_EKEY
 * and writes a reason (NUL-terminated) into why[0..whylen).  Pure,
 * thread-safe, no allocation.
 */
int tsec__key_parse(const char *p, size_t n, bool allow_root,
		    struct tsec__key *k, char *why, size_t whylen);

/*
 * tsec__key_parse without the derived attributes (kind, issuer_seg,
 * domain_seg, domain_wild; derived is 0): for a caller that may never
 * need them.  tsec__key_derive fills them, once.
 */
int tsec__key_split(const char *p, size_t n, bool allow_root,
		    struct tsec__key *k, char *why, size_t whylen);
void tsec__key_derive(struct tsec__key *k);

/*
 * The same reading, one byte at a time: what tsec__key_parse does for a
 * key its 16-byte blocks cannot take.  Tests and the fuzzer compare the
 * two.
 */
int tsec__key_parse_bytes(const char *p, size_t n, bool allow_root,
			  struct tsec__key *k, char *why, size_t whylen);

/* Writes the normalised key ("a/b/c") into out[0..outlen); returns length. */
size_t tsec__key_format(const struct tsec__key *k, char *out, size_t outlen);

/*
 * Writes the key's domain into out (wildcard_ read back as "*."), returns
 * its length, 0 when the key has none.
 */
size_t tsec__key_domain(const struct tsec__key *k, char *out, size_t outlen);

#endif
