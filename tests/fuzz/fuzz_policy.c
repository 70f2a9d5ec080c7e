/* libFuzzer: policy compile and lint, on any bytes. */
#include <stddef.h>
#include <stdint.h>

#include "module/module_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tsec__policy *pol = NULL;
	struct tsec_error err, errs[8];
	size_t n = 0;

	if (tsec__policy_compile((const char *)data, size, &pol, &err) == 0 && !pol)
		__builtin_trap(); /* success must give a policy */
	tsec__policy_free(&pol);
	tsec__policy_lint((const char *)data, size, errs, 8, &n);
	return 0;
}
