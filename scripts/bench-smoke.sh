#!/bin/sh
# Every benchmark, with tiny counts, on the same code path as a real run:
# a crash, a non-zero exit or a missing case fails (CI runs this, so a
# broken benchmark cannot go unnoticed).  Usage: bench-smoke.sh BUILD_DIR
set -u
B=${1:-build/release}
M=$B/libtinysecurity_module.so
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bad=0

# check NAME "CASE CASE ..." COMMAND...
check() {
	name=$1; cases=$2; shift 2
	timeout -k 10 600 "$@" >"$out" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			echo "bench-smoke: $name did not finish within 600 s; what it printed:"
		else
			echo "bench-smoke: $name failed (exit $rc):"
		fi
		tail -5 "$out"; bad=1; return
	fi
	for c in $cases; do
		# (a latency row starts "latency,": abba.sh reads those)
		if ! grep -q -E "^(latency,)?$c," "$out"; then
			echo "bench-smoke: $name printed no '$c' case"; bad=1
		fi
	done
	case $name in bench_*)
		# Every case the program prints is one this list checks: a new
		# case cannot go unchecked (data rows: a number second).
		for c in $(grep -E '^[A-Za-z0-9_.]+,[0-9]' "$out" | cut -d, -f1 | sort -u); do
			case " $(echo $cases) " in
			*" $c "*) ;;
			*) echo "bench-smoke: $name printed $c, a case this script does not check"; bad=1 ;;
			esac
		done
		# And its first line says where and how it ran.
		if ! head -n 1 "$out" | grep -q '^# host .*; cc .* build$'; then
			echo "bench-smoke: $name did not say its host, compiler and build first"; bad=1
		fi ;;
	esac
	echo "bench-smoke: $name ok"
}

check bench_bus "check2 evaluate" $B/bench_bus "$M" examples/policy.json 500
check bench_policy_scale "10 20 rules_32000_glob_siblings rules_10000_one_glob_long_key \
	rules_80000_one_resource principals_3000_x_resources_3000" $B/bench_policy_scale "$M" 10 20
check bench_certcache "lookup_exact lookup_wildcard lookup_miss lookup_all duplicate_insert \
	wildcard_4_threads empty_miss single_hit 64_origins_hit 256_origins_hit full_hit full_miss \
	shared_full_hit shared_full_miss untracked_guard_drop" env BENCH_SAMPLES=2 $B/bench_certcache 500
check bench_store "load_gated load_plain exists_gated exists_plain put_single_x3 put_many_3_crash_safe \
	lock_acquire_release lock_acquire_release_4_threads policy_check_only" \
	$B/bench_store
check bench_backend "local_hit_64 local_write_64 local_hit_4096 local_write_4096 gated_local_hit \
	gated_local_write local_1_write_simulated_2ms local_8_writes_simulated_2ms \
	resource_has_simulated_2ms resource_load_simulated_2ms guarded_8_independent_keys_1ms \
	guarded_8_same_key_1ms" env BENCH_ITERS=2000 $B/bench_backend 1
check bench_turn "turn_gated_memory turn_ungated_memory turn_gated_file turn_ungated_file \
	turn_broker_ipc_file turn_broker_tcp_curve_file turn_parallel_file_1 turn_parallel_file_16 \
	turn_parallel_tmpfs_1 turn_parallel_tmpfs_16" $B/bench_turn 5
check bench_zmq "throughput latency connect" $B/bench_zmq 200
check bench_fleet "file_load file_exists file_put file_put_many_3 \
	file_lock_acquire_release file_cache_load file_cache_exists file_cache_put \
	file_cache_put_many_3 file_cache_lock_acquire_release etcd_load etcd_exists etcd_put \
	etcd_put_many_3 etcd_lock_acquire_release etcd_cache_load etcd_cache_exists \
	etcd_cache_put etcd_cache_put_many_3 etcd_cache_lock_acquire_release redis_load \
	redis_exists redis_put redis_put_many_3 redis_lock_acquire_release redis_cache_load \
	redis_cache_exists redis_cache_put redis_cache_put_many_3 \
	redis_cache_lock_acquire_release brokers_1 brokers_2" $B/bench_fleet 50
check bench_remote "load_6k presence_6k republish_6k load_48k presence_48k republish_48k \
	store_load_cert_6k store_load_cert_48k s3_load_6k s3_presence_6k s3_republish_6k s3_load_48k \
	s3_presence_48k s3_republish_48k" env BENCH_SAMPLES=1 BENCH_S3_ITERS=5 $B/bench_remote 200
check bench_instructions "" $B/bench_instructions "$M" examples/policy.json 100
# The remote store's instructions per call (callgrind over bench_remote).
check remote_instructions "smoke" sh perf/remote_instructions.sh $B smoke 40
# Compiling N and 10N rules, and the ratio (callgrind).
check compile_instructions "distinct deep" sh perf/compile_instructions.sh $B 100
# The broker's instructions per call (bench_calls drives it under callgrind).
check broker_instructions "whole_process tsec__dispatch_fast tsec__log_decision tsec_endpoint_check" \
	sh perf/broker_instructions.sh $B 20
# A renewal turn's instructions through the broker (bench_turn drives it
# under callgrind).
check turn_instructions "whole_process libjansson libzmq" sh perf/turn_instructions.sh $B 5
# The A-B-B-A runner: both sides from another working directory (each
# side's benchmark loads its own module), and a failing run fails it.
here=$(pwd)
if ! (cd /tmp && BENCH_ITERS=2000 sh "$here/perf/abba.sh" -n 1 -o "$out.csv" "$here/$B" \
		"$here/$B" bench_backend 1 >"$out" 2>&1) && ! grep -q "every case excluded" "$out"; then
	echo "bench-smoke: perf/abba.sh failed:"; tail -5 "$out"; bad=1
elif (sh perf/abba.sh -n 1 -o "$out.csv" $B $B bench_bus /nonexistent.so >"$out" 2>&1); then
	echo "bench-smoke: perf/abba.sh exited 0 for a benchmark that failed"; bad=1
else
	echo "bench-smoke: perf/abba.sh ok"
fi
# It refuses two sides of different build modes (a debug side faked by
# its .flags stamp) before running anything.
fake=$(mktemp -d)
echo "cc -O0 -g3" > "$fake/.flags"
ln -s "$here/$B/bench_backend" "$fake/bench_backend"
sh perf/abba.sh -n 1 -o "$out.csv" $B "$fake" bench_backend 1 >"$out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "compare builds of one mode" "$out"; then
	echo "bench-smoke: perf/abba.sh ran a release side against a debug one (exit $rc)"; bad=1
fi
rm -rf "$fake"
# One driver for both sides (issue 53, item 10): a side whose own
# bench_bus is broken is still measured, through B's driver over that
# side's library and module; the output and the raw file say so, and
# each value carries the machine's load.
side=$(mktemp -d)
cp -P "$here/$B"/libtinysecurity.so* "$here/$B/libtinysecurity_module.so" "$here/$B/.flags" "$side/"
printf '#!/bin/sh\nexit 1\n' > "$side/bench_bus" && chmod +x "$side/bench_bus"
if ! BENCH_ITERS=2000 sh perf/abba.sh -n 1 -o "$out.csv" "$side" $B bench_bus \
		@/libtinysecurity_module.so examples/policy.json 2000 >"$out" 2>&1 &&
		! grep -q "every case excluded" "$out"; then
	echo "bench-smoke: perf/abba.sh ran the side's own program, not one driver:"; tail -5 "$out"; bad=1
elif ! grep -q "^# one driver, $B/bench_bus" "$out" || ! grep -q "^# driver: one driver" "$out.csv" ||
		! grep -q "^# machine load" "$out" || ! grep -Eq '^A1,1,[^,]+,[0-9.]+,[0-9.]+$' "$out.csv"; then
	echo "bench-smoke: perf/abba.sh does not say its driver and the load:"; cat "$out"; bad=1
else
	echo "bench-smoke: perf/abba.sh runs one driver over both sides"
fi
rm -rf "$side"
rm -f "$out.csv"
exit $bad
