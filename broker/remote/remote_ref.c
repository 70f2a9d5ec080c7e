/*
 * References and generation records of the remote certificate store
 * (remote_private.h has the format): their text, their MAC and their
 * reading.  Both are read back from a coordinator that callers write
 * too, so neither is trusted until its MAC verifies for the key it was
 * read from.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "broker/remote/remote_private.h"
#include "common/error.h"

/* ---- MACs ---- */

/* Lower-case hex of 32 bytes (a MAC this process computed; what it is
 * compared with is compared in constant time). */
static void hex32(const uint8_t h[32], char out[TSEC__RMAC_HEX + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		out[2 * i] = digits[h[i] >> 4];
		out[2 * i + 1] = digits[h[i] & 15];
	}
	out[TSEC__RMAC_HEX] = 0;
}

static void put_le64(crypto_generichash_state *st, uint64_t v)
{
	uint8_t b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	crypto_generichash_update(st, b, 8);
}

static void put_str(crypto_generichash_state *st, const char *s)
{
	crypto_generichash_update(st, (const uint8_t *)s, strlen(s) + 1);
}

static void ref_mac(const struct tsec_remote *r, const char *place, const struct tsec__ref *f,
		    char out[TSEC__RMAC_HEX + 1])
{
	static const uint8_t head[] = "tsec-ref\0\2";
	crypto_generichash_state st;
	uint8_t h[32];

	st = r->st_ref;
	crypto_generichash_update(&st, head, sizeof(head) - 1);
	put_str(&st, place);
	put_str(&st, f->blob);
	put_le64(&st, f->size);
	put_le64(&st, f->gen);
	put_str(&st, f->id);
	put_str(&st, f->by);
	crypto_generichash_final(&st, h, sizeof(h));
	hex32(h, out);
}

static void rec_mac(const struct tsec_remote *r, const char *key, const struct tsec__rrec *c,
		    char out[TSEC__RMAC_HEX + 1])
{
	static const uint8_t head[] = "tsec-gen\0\2";
	crypto_generichash_state st;
	uint8_t h[32];

	st = r->st_ref;
	crypto_generichash_update(&st, head, sizeof(head) - 1);
	put_str(&st, key);
	put_le64(&st, c->seq);
	put_le64(&st, c->gen);
	put_str(&st, c->id);
	put_le64(&st, c->parts);
	crypto_generichash_final(&st, h, sizeof(h));
	hex32(h, out);
}

/* Whether p[0..n) is lower-case hex (a table: this runs on every
 * reference a load reads). */
static bool hex_run(const char *p, size_t n)
{
	static const uint8_t is_hex[256] = {
		['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,
		['7'] = 1, ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1,
		['e'] = 1, ['f'] = 1,
	};
	unsigned ok = 1;

	for (size_t i = 0; i < n; i++)
		ok &= is_hex[(unsigned char)p[i]];
	return ok;
}

/* ---- references ---- */

char *tsec__ref_text(const struct tsec_remote *r, const char *place, struct tsec__ref *f)
{
	json_t *j;
	char *t;

	ref_mac(r, place, f, f->mac);
	j = json_pack("{s:i, s:I, s:s, s:s, s:I, s:s, s:s}", "tsec_ref", TSEC_REMOTE_FORMAT,
		      "gen", (json_int_t)f->gen, "id", f->id, "blob", f->blob,
		      "size", (json_int_t)f->size, "by", f->by, "mac", f->mac);
	t = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	return t;
}

/* Reads up to 15 decimal digits without a leading zero: 1, or 0. */
static int take_uint(const char **pp, const char *e, uint64_t *v)
{
	const char *p = *pp;
	int digits = 0;

	*v = 0;
	while (p < e && *p >= '0' && *p <= '9' && digits < 16) {
		*v = *v * 10 + (uint64_t)(*p++ - '0');
		digits++;
	}
	if (!digits || digits > 15 || (digits > 1 && p[-digits] == '0'))
		return 0;
	*pp = p;
	return 1;
}

/*
 * A reference exactly as tsec__ref_text writes it, read without a tree
 * (a jansson parse was a quarter of a Load): 1 when read, 0 when the
 * text has any other shape (then jansson reads it, any valid layout).
 */
static int parse_fast(const char *t, size_t len, int kind, struct tsec__ref *out)
{
	static const char p1[] = "{\"tsec_ref\":2,\"gen\":", p2[] = ",\"id\":\"",
			  p3[] = "\",\"blob\":\"", p4[] = "\",\"size\":", p5[] = ",\"by\":\"",
			  p6[] = "\",\"mac\":\"";
	const char *e = t + len, *p = t, *q;
	size_t kl = strlen(tsec__rkind[kind]);

#define TAKE(lit) (((size_t)(e - p) >= sizeof(lit) - 1 && !memcmp(p, lit, sizeof(lit) - 1)) \
		   ? (p += sizeof(lit) - 1, 1) : 0)
	if (!TAKE(p1) || !take_uint(&p, e, &out->gen) || !TAKE(p2) || e - p < TSEC__RID_HEX ||
	    !hex_run(p, TSEC__RID_HEX))
		return 0;
	memcpy(out->id, p, TSEC__RID_HEX);
	out->id[TSEC__RID_HEX] = 0;
	p += TSEC__RID_HEX;
	if (!TAKE(p3) || (size_t)(e - p) < kl + 1 + 64 || memcmp(p, tsec__rkind[kind], kl) ||
	    p[kl] != '/' || !hex_run(p + kl + 1, 64))
		return 0;
	memcpy(out->blob, p, kl + 65);
	out->blob[kl + 65] = 0;
	p += kl + 65;
	if (!TAKE(p4) || !take_uint(&p, e, &out->size) || !TAKE(p5))
		return 0;
	if (!(q = memchr(p, '"', (size_t)(e - p))) || (size_t)(q - p) > TSEC__RBY_MAX)
		return 0;
	for (const char *c = p; c < q; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f || *c == '\\')
			return 0;
	memcpy(out->by, p, (size_t)(q - p));
	out->by[q - p] = 0;
	p = q;
	if (!TAKE(p6) || e - p != TSEC__RMAC_HEX + 2 || !hex_run(p, TSEC__RMAC_HEX) ||
	    p[TSEC__RMAC_HEX] != '"' || p[TSEC__RMAC_HEX + 1] != '}')
		return 0;
	memcpy(out->mac, p, TSEC__RMAC_HEX);
	out->mac[TSEC__RMAC_HEX] = 0;
#undef TAKE
	return 1;
}

/* A string member of exactly n lower-case hex digits into out. */
static bool hex_member(const json_t *j, const char *name, size_t n, char *out)
{
	const char *s = json_string_value(json_object_get(j, name));

	if (!s || json_string_length(json_object_get(j, name)) != n || !hex_run(s, n))
		return false;
	memcpy(out, s, n + 1);
	return true;
}

static bool uint_member(const json_t *j, const char *name, uint64_t *out)
{
	const json_t *v = json_object_get(j, name);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* The format a reference or record says it is of ("tsec_ref" or
 * "tsec_gen"), with why it cannot be read when it is not ours: 0 or
 * TSEC_ECORRUPT. */
static int format_of(const json_t *j, const char *member, const char *what, const char *where,
		     struct tsec_error *err)
{
	const json_t *v = json_object_get(j, member);
	json_int_t f = json_is_integer(v) ? json_integer_value(v) : -1;

	if (f == TSEC_REMOTE_FORMAT)
		return 0;
	if (f == 1)
		return tsec__seterr(err, TSEC_ECORRUPT, where, "%s is a format-1 %s, which carried "
				    "no authentication: refused (publish the certificate again)",
				    where, what);
	if (f > TSEC_REMOTE_FORMAT)
		return tsec__seterr(err, TSEC_ECORRUPT, where, "%s was written by a later version "
				    "(format %lld)", where, (long long)f);
	return tsec__seterr(err, TSEC_ECORRUPT, where, "%s is not a remote-store %s", where, what);
}

static int parse_slow(const char *text, size_t len, int kind, struct tsec__ref *out,
		      const char *where, struct tsec_error *err)
{
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	const char *blob, *by;
	int rc;

	if (!json_is_object(j)) {
		json_decref(j);
		return tsec__seterr(err, TSEC_ECORRUPT, where, "%s is not a remote-store reference",
				    where);
	}
	if ((rc = format_of(j, "tsec_ref", "reference", where, err)))
		goto out;
	blob = json_string_value(json_object_get(j, "blob"));
	by = json_string_value(json_object_get(j, "by"));
	if (!uint_member(j, "gen", &out->gen) || !hex_member(j, "id", TSEC__RID_HEX, out->id) ||
	    !blob || !tsec__blob_name_ok(blob) ||
	    strncmp(blob, tsec__rkind[kind], strlen(tsec__rkind[kind])) ||
	    blob[strlen(tsec__rkind[kind])] != '/' || !uint_member(j, "size", &out->size) ||
	    !by || json_string_length(json_object_get(j, "by")) != strlen(by) ||
	    strlen(by) > TSEC__RBY_MAX || !hex_member(j, "mac", TSEC__RMAC_HEX, out->mac)) {
		rc = tsec__seterr(err, TSEC_ECORRUPT, where, "%s: a malformed reference", where);
		goto out;
	}
	memcpy(out->blob, blob, strlen(blob) + 1);
	memcpy(out->by, by, strlen(by) + 1);
out:
	json_decref(j);
	return rc;
}

static int parse(const char *text, size_t len, int kind, struct tsec__ref *out,
		 const char *where, struct tsec_error *err)
{
	memset(out, 0, sizeof(*out));
	return parse_fast(text, len, kind, out) ? 0 : parse_slow(text, len, kind, out, where, err);
}

int tsec__ref_read(struct tsec_remote *r, const char *text, size_t len, int kind,
		   const char *place, struct tsec__ref *out, struct tsec_error *err)
{
	char want[TSEC__RMAC_HEX + 1];
	int rc;

	if ((rc = parse(text, len, kind, out, place, err)) == 0) {
		ref_mac(r, place, out, want);
		if (sodium_memcmp(want, out->mac, TSEC__RMAC_HEX) != 0)
			rc = tsec__seterr(err, TSEC_ECORRUPT, place, "%s does not verify as a "
					  "reference this store wrote there (written by hand, "
					  "copied from elsewhere, or altered): refused", place);
	}
	if (rc)
		atomic_fetch_add(&r->n_refused, 1);
	return rc;
}

int tsec__ref_blob(const char *text, size_t len, char name[TSEC__BLOB_NAME_MAX + 1])
{
	json_t *j = len && text[0] == '{' ? json_loadb(text, len, 0, NULL) : NULL;
	const char *b = json_string_value(json_object_get(j, "blob"));
	int rc = -1;

	if (b && json_object_get(j, "tsec_ref") && tsec__blob_name_ok(b)) {
		snprintf(name, TSEC__BLOB_NAME_MAX + 1, "%s", b);
		rc = 0;
	}
	json_decref(j);
	return rc;
}

/* ---- generation records ---- */

char *tsec__rrec_text(const struct tsec_remote *r, const char *key, struct tsec__rrec *c)
{
	json_t *j;
	char *t;

	rec_mac(r, key, c, c->mac);
	j = json_pack("{s:i, s:I, s:I, s:s, s:i, s:s}", "tsec_gen", TSEC_REMOTE_FORMAT,
		      "seq", (json_int_t)c->seq, "gen", (json_int_t)c->gen, "id", c->id,
		      "parts", (int)c->parts, "mac", c->mac);
	t = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	return t;
}

/* A record exactly as tsec__rrec_text writes it, read without a tree:
 * 1, or 0 for any other shape (then jansson reads it). */
static int rec_fast(const char *t, size_t len, struct tsec__rrec *c)
{
	static const char p1[] = "{\"tsec_gen\":2,\"seq\":", p2[] = ",\"gen\":",
			  p3[] = ",\"id\":\"", p4[] = "\",\"parts\":", p5[] = ",\"mac\":\"";
	const char *e = t + len, *p = t;
	uint64_t parts;

#define TAKE(lit) (((size_t)(e - p) >= sizeof(lit) - 1 && !memcmp(p, lit, sizeof(lit) - 1)) \
		   ? (p += sizeof(lit) - 1, 1) : 0)
	if (!TAKE(p1) || !take_uint(&p, e, &c->seq) || !TAKE(p2) || !take_uint(&p, e, &c->gen) ||
	    !TAKE(p3) || e - p < TSEC__RID_HEX || !hex_run(p, TSEC__RID_HEX))
		return 0;
	memcpy(c->id, p, TSEC__RID_HEX);
	c->id[TSEC__RID_HEX] = 0;
	p += TSEC__RID_HEX;
	if (!TAKE(p4) || !take_uint(&p, e, &parts) || parts > TSEC__PARTS_ALL || !TAKE(p5) ||
	    e - p != TSEC__RMAC_HEX + 2 || !hex_run(p, TSEC__RMAC_HEX) ||
	    p[TSEC__RMAC_HEX] != '"' || p[TSEC__RMAC_HEX + 1] != '}')
		return 0;
#undef TAKE
	memcpy(c->mac, p, TSEC__RMAC_HEX);
	c->mac[TSEC__RMAC_HEX] = 0;
	c->parts = (unsigned)parts;
	return 1;
}

int tsec__rrec_read(struct tsec_remote *r, const char *text, size_t len, const char *key,
		    struct tsec__rrec *c, struct tsec_error *err)
{
	char want[TSEC__RMAC_HEX + 1];
	uint64_t parts;
	json_t *j;
	int rc = 0;

	memset(c, 0, sizeof(*c));
	if (rec_fast(text, len, c)) {
		j = NULL;
		goto verify;
	}
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(j)) {
		rc = tsec__seterr(err, TSEC_ECORRUPT, key, "%s is not a generation record", key);
		goto out;
	}
	if ((rc = format_of(j, "tsec_gen", "generation record", key, err)))
		goto out;
	if (!uint_member(j, "seq", &c->seq) || !uint_member(j, "gen", &c->gen) ||
	    !hex_member(j, "id", TSEC__RID_HEX, c->id) || !uint_member(j, "parts", &parts) ||
	    parts > TSEC__PARTS_ALL || !hex_member(j, "mac", TSEC__RMAC_HEX, c->mac)) {
		rc = tsec__seterr(err, TSEC_ECORRUPT, key, "%s: a malformed generation record", key);
		goto out;
	}
	c->parts = (unsigned)parts;
verify:
	rec_mac(r, key, c, want);
	if (sodium_memcmp(want, c->mac, TSEC__RMAC_HEX) != 0)
		rc = tsec__seterr(err, TSEC_ECORRUPT, key, "%s does not verify (altered, or written "
				  "with another key file)", key);
out:
	json_decref(j);
	if (rc)
		atomic_fetch_add(&r->n_refused, 1);
	return rc;
}

int tsec__remote_ref_agree(const char *text, size_t len)
{
	for (int kind = 0; kind < TSEC__RK; kind++) {
		struct tsec__ref fast, slow;
		struct tsec_error err;
		char *copy;
		int rc;

		memset(&fast, 0, sizeof(fast));
		if (!parse_fast(text, len, kind, &fast))
			continue;
		/* jansson must read the same reference from the same bytes: a
		 * copy with one space after the brace takes its path. */
		if (!(copy = malloc(len + 1)))
			return -1;
		copy[0] = '{';
		copy[1] = ' ';
		memcpy(copy + 2, text + 1, len - 1);
		memset(&slow, 0, sizeof(slow));
		rc = parse_slow(copy, len + 1, kind, &slow, "fuzz", &err);
		free(copy);
		if (rc || strcmp(fast.id, slow.id) || strcmp(fast.blob, slow.blob) ||
		    strcmp(fast.by, slow.by) || strcmp(fast.mac, slow.mac) ||
		    fast.size != slow.size || fast.gen != slow.gen)
			return -1;
	}
	/* The same for a record: the fast reader and jansson agree. */
	{
		struct tsec__rrec fast, slow;
		char *copy;
		json_t *j;
		uint64_t parts;
		bool ok;

		memset(&fast, 0, sizeof(fast));
		if (!rec_fast(text, len, &fast))
			return 0;
		if (!(copy = malloc(len + 1)))
			return -1;
		copy[0] = '{';
		copy[1] = ' ';
		memcpy(copy + 2, text + 1, len - 1);
		j = json_loadb(copy, len + 1, JSON_REJECT_DUPLICATES, NULL);
		free(copy);
		memset(&slow, 0, sizeof(slow));
		ok = json_is_object(j) && json_integer_value(json_object_get(j, "tsec_gen")) == 2 &&
		     uint_member(j, "seq", &slow.seq) && uint_member(j, "gen", &slow.gen) &&
		     hex_member(j, "id", TSEC__RID_HEX, slow.id) &&
		     uint_member(j, "parts", &parts) && parts == fast.parts &&
		     hex_member(j, "mac", TSEC__RMAC_HEX, slow.mac) && slow.seq == fast.seq &&
		     slow.gen == fast.gen && !strcmp(slow.id, fast.id) && !strcmp(slow.mac, fast.mac);
		json_decref(j);
		return ok ? 0 : -1;
	}
}
