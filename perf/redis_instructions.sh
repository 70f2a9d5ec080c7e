#!/bin/sh
# Instructions per call of the gated store's get, exists and put of a
# 4 KiB value on redis (callgrind, inclusive cost over the calls of
# bench_fleet's redis case: N each, and one more put that seeds the key).
# The redis-server it starts is not traced: the count is this library's
# own work, hiredis and the socket calls included.
# Usage: sh perf/redis_instructions.sh BUILD_DIR [LABEL [N]]
# Prints CSV rows "build,function,instructions_per_call".
set -eu
B=${1:-build/release}
label=${2:-$(git rev-parse --short HEAD 2>/dev/null || echo head)}
n=${3:-400}
out=$(mktemp -d /tmp/tsec-redis-ir-XXXXXX)
trap 'rm -rf "$out"' EXIT
BENCH_ONLY=redis valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
	"$B/bench_fleet" "$n" > /dev/null 2>&1
for f in tsec_store_get tsec_store_exists tsec_store_put; do
	calls=$n
	[ "$f" = tsec_store_put ] && calls=$((n + 1))
	ir=$(callgrind_annotate --inclusive=yes "$out/cg" 2>/dev/null |
		awk -v f="$f" '$0 ~ ("[ :]" f " ") || $0 ~ (":" f "$") || $0 ~ (" " f "$") {
			gsub(",", "", $1); print $1; exit }')
	[ -n "$ir" ] || { echo "redis_instructions: no $f in the profile" >&2; exit 1; }
	echo "$label,$f,$(( ir / calls ))"
done
