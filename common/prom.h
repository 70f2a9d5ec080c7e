/* Internal: the broker's stats (the "stats" reply) as Prometheus text. */
#ifndef TSEC_COMMON_PROM_H
#define TSEC_COMMON_PROM_H

#include <jansson.h>

/* The latency histograms' upper bounds, microseconds (then +Inf). */
#define TSEC_LAT_BUCKETS 12
extern const unsigned tsec__lat_bounds_us[TSEC_LAT_BUCKETS];

/*
 * Renders a stats object in the Prometheus text exposition format
 * (version 0.0.4): counters as tsec_*_total, gauges, and per-method
 * latency histograms.  New string (free()), or NULL without memory.
 */
char *tsec__prometheus(const json_t *stats);

#endif
