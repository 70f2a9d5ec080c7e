/*
 * libFuzzer: the client library's reply readers (issue 52, item 8).  The
 * input is a broker's reply to call 5, any bytes: read as every call
 * reads it (tsec__client_finish: a result handed on as its text, or an
 * error), then the result read as check's answer (decisions).  A result
 * handed on must be one JSON value, the very value the reply holds as
 * "result"; an error's message must be printable.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "broker/client/client_private.h"
#include "common/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decisions(const char *result)
{
	json_t *res = json_loads(result, 0, NULL);
	json_t *ds = json_object_get(res, "decisions");
	struct tsec_decision d;

	for (size_t i = 0; i < json_array_size(ds) && i < 64; i++)
		if (tsec__decision_from_json(json_array_get(ds, i), &d) == 0 &&
		    d.allow && d.status != TSEC_STATUS_ALLOWED)
			abort();     /* an allow only for "allowed by rule" */
	json_decref(res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec_client c;
	struct tsec_error err = { 0 };
	char *r, *result = NULL;
	int rc;

	if (memchr(data, 0, size))
		return 0;            /* a reply is text: the receiver cuts at NUL */
	if (!(r = malloc(size + 1)))
		return 0;
	memcpy(r, data, size);
	r[size] = '\0';
	memset(&c, 0, sizeof(c));
	rc = tsec__client_finish(&c, 5, r, &result, &err);   /* frees r */
	if (rc == 0) {
		json_t *whole = json_loadb((const char *)data, size, 0, NULL);
		json_t *mine = json_loads(result, JSON_DECODE_ANY, NULL);

		if (!mine || !json_equal(mine, json_object_get(whole, "result")))
			abort();     /* handed on what the reply does not hold */
		decisions(result);
		json_decref(mine);
		json_decref(whole);
	} else {
		for (const char *p = err.msg; *p; p++)
			if ((unsigned char)*p < 0x20)
				abort();
	}
	free(result);
	free(c.last_error);
	return 0;
}
