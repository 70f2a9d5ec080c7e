/*
 * libFuzzer: certificate conditions.  Any bytes as the PEM of a
 * certificate being stored, under a policy with every cert condition.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tinysecurity/bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *policy =
	"{\"version\": 1, \"floor\": [{\"id\": \"f\", \"action\": [\"storage.store\"],"
	" \"resource\": [\"certificates/**\"], \"when\": {\"cert\": {\"min_rsa_bits\": 4096}}}],"
	" \"rules\": [{\"id\": \"a\", \"effect\": \"allow\", \"action\": [\"storage.store\"],"
	" \"resource\": [\"certificates/**\"], \"when\": {\"cert\": {\"san_covers_domain\": true,"
	" \"min_remaining_s\": 3600, \"min_rsa_bits\": 2048,"
	" \"key_types\": [\"rsa\", \"ec-p256\", \"ed25519\"]}}}]}";

static struct tsec_bus *bus;
static struct tsec_report rep;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec_request r;
	struct tsec_decision d;
	struct tsec_error err;

	if (!bus && (tsec_bus_new(&bus) ||
		     tsec_bus_load(bus, "policy", TSEC_FUZZ_MODULE, policy, strlen(policy), &err)))
		abort();
	memset(&r, 0, sizeof(r));
	r.principal = tsec_str_c("svc:issuer");
	r.action = tsec_str_c("storage.store");
	r.resource = tsec_str_c("certificates/acme/example.com/example.com.crt");
	r.ctx.has = TSEC_CTX_SIZE | TSEC_CTX_CERT_PEM;
	r.ctx.size = size;
	r.ctx.cert_pem.ptr = (const char *)data;
	r.ctx.cert_pem.len = size;
	if (tsec_bus_check(bus, "policy", &r, 1, &d, &err) == 0 && d.allow)
		__builtin_trap(); /* random bytes are no certificate a floor lets by */
	tsec_bus_evaluate(bus, "policy", &r, &rep, &err);
	return 0;
}
