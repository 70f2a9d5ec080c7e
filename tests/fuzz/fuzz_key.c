/*
 * libFuzzer: key parsing, with its invariants: a normalised key has no
 * ".." segment, no leading '/', no NUL, no control character, and
 * normalising it again changes nothing; and the 16-byte block reading
 * agrees with the byte loop on every input (result, reason, segments,
 * attributes).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/key.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec__key k, k2;
	char why[128], text[TSEC_KEY_MAX + 1], again[TSEC_KEY_MAX + 1];

	for (int root_ok = 0; root_ok < 2; root_ok++) {
		struct tsec__key kb;
		char whyb[128];
		int rc = tsec__key_parse((const char *)data, size, root_ok, &k, why, sizeof(why));

		if (rc != tsec__key_parse_bytes((const char *)data, size, root_ok, &kb, whyb,
						sizeof(whyb)) ||
		    (rc && strcmp(why, whyb)) ||
		    (!rc && (k.nseg != kb.nseg || k.kind != kb.kind ||
			     k.issuer_seg != kb.issuer_seg || k.domain_seg != kb.domain_seg ||
			     k.domain_wild != kb.domain_wild ||
			     memcmp(k.off, kb.off, k.nseg * sizeof(k.off[0])) ||
			     memcmp(k.len, kb.len, k.nseg * sizeof(k.len[0])))))
			__builtin_trap(); /* the two readings disagree */
		if (rc)
			continue;
		tsec__key_format(&k, text, sizeof(text));
		if (text[0] == '/' || strstr(text, "/../") || !strncmp(text, "../", 3) ||
		    !strcmp(text, "..") || (strlen(text) >= 3 && !strcmp(text + strlen(text) - 3, "/..")))
			__builtin_trap();
		for (const char *p = text; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\')
				__builtin_trap();
		if (tsec__key_parse(text, strlen(text), root_ok, &k2, why, sizeof(why)))
			__builtin_trap(); /* a normalised key is a key */
		tsec__key_format(&k2, again, sizeof(again));
		if (strcmp(text, again))
			__builtin_trap(); /* normalising twice changes nothing */
	}
	return 0;
}
