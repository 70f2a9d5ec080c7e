/*
 * libFuzzer: the remote store's fast readers of references and
 * generation records against jansson, alone (fuzz_remote runs them too,
 * among a store's whole load, at a few thousand inputs a second; a
 * differential needs far more to reach the shapes where two readers
 * part).  Any input the fast reader takes must read the same through
 * jansson.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "broker/remote/remote_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (tsec__remote_ref_agree((const char *)data, size))
		abort();
	return 0;
}
