/* Helpers shared by the tests that go through the bus. */
#ifndef TSEC_TESTUTIL_H
#define TSEC_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tinysecurity/bus.h"

#define MODULE_PATH TSEC_BUILD_DIR "/libtinysecurity_module.so"
#define FIXTURE(name) TSEC_BUILD_DIR "/fixtures/" name ".so"

/* A new bus with the real module on "policy" loaded from a policy file. */
struct tsec_bus *tu_bus_with_policy(const char *policy_path);

/* The same with policy text. */
struct tsec_bus *tu_bus_with_text(const char *text);

#endif
