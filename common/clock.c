/* The clocks' one variable (common/clock.h). */
#include "common/clock.h"

int64_t tsec__wall_skew_ms;
