/*
 * libFuzzer: the tree-less Check reader (common/wire_fast.c) against
 * jansson, alone (tests/wire_diff.h): fuzz_wire runs the same check
 * among a whole call through the daemon, a few thousand inputs a second;
 * a differential needs far more to reach the bytes where two readers
 * part ("-null" as an id: the fast reader took it as null).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/wire_diff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int took;

	if (tu_wire_diff((const char *)data, size, &took))
		abort();
	return 0;
}
