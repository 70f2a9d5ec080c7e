/*
 * Internal: the broker's statistics, listed once.  Each is a key of the
 * "stats" answer and a Prometheus metric (common/prom.c); the counters
 * are also the daemon's atomic fields (broker/daemon/daemon.h), the rest
 * are read where they live (the decision log, the held-lock table, the
 * LocalCache).
 */
#ifndef TSEC_COMMON_STATS_H
#define TSEC_COMMON_STATS_H

/* X(field and key, Prometheus name, help): counters the daemon counts. */
#define TSEC_STAT_COUNTERS(X) \
	X(calls, "tsec_calls_total", "Calls received.") \
	X(errors, "tsec_errors_total", "Calls answered with an error.") \
	X(denied, "tsec_denied_total", "Decisions that denied.") \
	X(malformed, "tsec_malformed_total", "Messages that were not valid calls.") \
	X(oversized, "tsec_oversized_total", "Messages over max_message.") \
	X(principal_mismatch, "tsec_principal_mismatch_total", \
	  "Payloads that named another principal.") \
	X(zap_accepted, "tsec_zap_accepted_total", "CURVE keys accepted.") \
	X(zap_refused, "tsec_zap_refused_total", "CURVE keys refused.") \
	X(reloads, "tsec_reloads_total", "Policy reloads that took effect.") \
	X(reload_failures, "tsec_reload_failures_total", "Policy reloads refused.") \
	X(metrics_evicted, "tsec_metrics_idle_closed_total", \
	  "Idle connections to metrics_listen closed to admit a new one.") \
	X(ask_evicted, "tsec_ask_idle_closed_total", \
	  "Idle connections to an ask listener closed to admit a new one.") \
	X(cache_answered, "tsec_loop_cache_answers_total", \
	  "store.get and store.exists calls answered from the LocalCache on the loop, with no worker.") \
	X(cancels, "tsec_cancels_total", "Cancel calls received.") \
	X(waits_dropped, "tsec_lock_waits_dropped_total", \
	  "Lock waits ended because their caller went away or cancelled them.") \
	X(grants_undone, "tsec_lock_grants_undone_total", \
	  "Locks granted to a caller that had gone or cancelled, let go at once.")

/* X(key, Prometheus name, type, help): read from the parts that hold them. */
#define TSEC_STAT_READ(X) \
	X(log_written, "tsec_decision_log_written_total", "counter", "Decision log lines written.") \
	X(log_dropped, "tsec_decision_log_dropped_total", "counter", \
	  "Decision log lines dropped (buffer full).") \
	X(locks_held, "tsec_locks_held", "gauge", "Live leases handed out by this broker.") \
	X(calls_queued, "tsec_calls_queued", "gauge", \
	  "Calls waiting for a free worker (each caller's served in turn).") \
	X(lock_waits, "tsec_lock_waits", "gauge", \
	  "lock.acquire calls waiting for a held lock (kept by the loop, no worker held).") \
	X(cache_hits, "tsec_cache_hits_total", "counter", "Reads the LocalCache served.") \
	X(cache_misses, "tsec_cache_misses_total", "counter", \
	  "Reads the LocalCache sent to the backend.") \
	X(cache_live, "tsec_cache_feed_live", "gauge", \
	  "1 while the LocalCache serves hits (its feed proven live within its bound).") \
	X(cache_bound_ms, "tsec_cache_staleness_bound_milliseconds", "gauge", \
	  "The most a cached value served can lag the store.") \
	X(cache_proven_ms_ago, "tsec_cache_feed_proof_age_milliseconds", "gauge", \
	  "Since the feed last proved live (-1: never).") \
	X(remote_refused, "tsec_remote_refused_total", "counter", \
	  "Remote-store references or records refused: not written where they sit by this store.") \
	X(remote_rollbacks, "tsec_remote_rollbacks_total", "counter", \
	  "Remote-store references or records refused as older than the current ones.") \
	X(remote_corrupt, "tsec_remote_corrupt_blobs_total", "counter", \
	  "Remote-store blobs that did not verify.") \
	X(remote_repaired, "tsec_remote_repaired_blobs_total", "counter", \
	  "Remote-store blobs a publish wrote again over bad ones.") \
	X(remote_conflicts, "tsec_remote_conflicts_total", "counter", \
	  "Remote-store publishes another publish beat.")

#endif
