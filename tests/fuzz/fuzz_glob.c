/*
 * libFuzzer: the policy's key patterns against a plain reference matcher
 * (issue 52, item 8).  The input, split at its first NUL, is a pattern
 * and a key over a small alphabet (each byte picks one of "ab*./-", so
 * patterns and keys meet often); the pattern is compiled into a policy
 * of one allow rule, the key decided against it by the module's trie
 * walk, and the answer compared with a recursive matcher written from
 * docs/policy.md: segments split at '/', '*' any run of bytes inside one
 * segment, '**' alone as a segment any number of whole segments, the
 * key in its normal form (no empty or "." segment).  A
 * pattern the compiler refuses, or a key the module calls invalid, is
 * skipped; any other disagreement aborts.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module/module_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXLEN 48

/* '*' inside one segment, by plain recursion (inputs are short). */
static bool seg_ref(const char *p, size_t pn, const char *s, size_t sn)
{
	if (!pn)
		return !sn;
	if (*p == '*')
		return seg_ref(p + 1, pn - 1, s, sn) || (sn && seg_ref(p, pn, s + 1, sn - 1));
	return sn && *p == *s && seg_ref(p + 1, pn - 1, s + 1, sn - 1);
}

static size_t seg_len(const char *s, size_t n)
{
	const char *slash = memchr(s, '/', n);

	return slash ? (size_t)(slash - s) : n;
}

/* Whole keys: p and k are the rest of each after a '/', or all of it. */
static bool key_ref(const char *p, size_t pn, bool pend, const char *k, size_t kn, bool kend)
{
	size_t ps, ks;

	if (pend)
		return kend;
	ps = seg_len(p, pn);
	if (ps == 2 && p[0] == '*' && p[1] == '*') {
		bool last = ps == pn;

		/* Zero segments, or the key's next one and try again. */
		if (key_ref(last ? p : p + 3, last ? 0 : pn - 3, last, k, kn, kend))
			return true;
		if (kend)
			return false;
		ks = seg_len(k, kn);
		return key_ref(p, pn, false, ks == kn ? k : k + ks + 1, ks == kn ? 0 : kn - ks - 1,
			       ks == kn);
	}
	if (kend)
		return false;
	ks = seg_len(k, kn);
	if (!seg_ref(p, ps, k, ks))
		return false;
	return key_ref(ps == pn ? p : p + ps + 1, ps == pn ? 0 : pn - ps - 1, ps == pn,
		       ks == kn ? k : k + ks + 1, ks == kn ? 0 : kn - ks - 1, ks == kn);
}

static size_t take(const uint8_t *d, size_t n, char *out, bool star)
{
	static const char alpha[] = "ab*./-";
	size_t o = 0;

	for (size_t i = 0; i < n && o < MAXLEN; i++)
		out[o++] = alpha[d[i] % (star ? 6 : 5) + (!star && d[i] % 5 >= 2)];
	out[o] = '\0';
	return o;
}

/* The key's normal form (docs/policy.md): empty and "." segments go. */
static size_t normal(const char *k, size_t kn, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < kn;) {
		size_t sl = seg_len(k + i, kn - i);

		if (sl && !(sl == 1 && k[i] == '.')) {
			if (o)
				out[o++] = '/';
			memcpy(out + o, k + i, sl);
			o += sl;
		}
		i += sl + 1;
	}
	out[o] = '\0';
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	char pat[MAXLEN + 1], key[MAXLEN + 1], norm[MAXLEN + 1], text[256];
	size_t pn, kn, nn;
	struct tsec__policy *pol = NULL;
	struct tsec_error err;
	struct tsec_decision d;
	struct tsec_request r;
	bool want;

	if (!nul)
		return 0;
	pn = take(data, (size_t)(nul - data), pat, true);
	kn = take(nul + 1, size - (size_t)(nul - data) - 1, key, false);
	snprintf(text, sizeof(text),
		 "{\"version\": 1, \"rules\": [{\"id\": \"r\", \"effect\": \"allow\","
		 " \"principal\": [\"svc:x\"], \"action\": [\"storage.load\"],"
		 " \"resource\": [\"%s\"]}]}", pat);
	if (tsec__policy_compile(text, strlen(text), &pol, &err))
		return 0;
	memset(&r, 0, sizeof(r));
	r.principal = (struct tsec_str){ "svc:x", 5 };
	r.action = (struct tsec_str){ "storage.load", 12 };
	r.resource = (struct tsec_str){ key, kn };
	memset(&d, 0, sizeof(d));
	tsec__decide(pol, &r, &d, NULL, NULL, NULL);
	tsec__policy_free(&pol);
	if (d.status == TSEC_STATUS_INVALID)
		return 0;
	nn = normal(key, kn, norm);
	want = key_ref(pat, pn, false, norm, nn, false);
	if (d.allow != want) {
		fprintf(stderr, "pattern '%s' key '%s': module %s, reference %s\n", pat, key,
			d.allow ? "allows" : "denies", want ? "allows" : "denies");
		abort();
	}
	return 0;
}
