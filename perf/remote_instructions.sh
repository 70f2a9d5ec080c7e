#!/bin/sh
# Instructions per call of the remote store's Load, Presence and
# Republish, beside tsec_store_load_cert of the same files (callgrind,
# inclusive cost of each function over its calls: N measured, 400 by
# default, and the benchmark's warm-up, 5% of N).
# Usage: sh perf/remote_instructions.sh BUILD_DIR [LABEL [N]]
# Prints CSV rows "build,payload,function,instructions_per_call".
set -eu
B=${1:-build/release}
label=${2:-$(git rev-parse --short HEAD 2>/dev/null || echo head)}
n=${3:-400}
calls=$(( n + (n / 20 < 500 ? n / 20 : 500) ))
out=$(mktemp -d /tmp/tsec-remote-ir-XXXXXX)
trap 'rm -rf "$out"' EXIT
for p in 6k 48k; do
	BENCH_ONLY=$p BENCH_S3=0 BENCH_SAMPLES=1 valgrind --tool=callgrind \
		--callgrind-out-file="$out/cg.$p" "$B/bench_remote" "$n" > /dev/null 2>&1
	for f in tsec_remote_load tsec_remote_exists tsec_remote_publish tsec_store_load_cert; do
		ir=$(callgrind_annotate --inclusive=yes "$out/cg.$p" 2>/dev/null |
			awk -v f="$f" '$0 ~ ("[ :]" f " ") || $0 ~ (":" f "$") || $0 ~ (" " f "$") {
				gsub(",", "", $1); print $1; exit }')
		[ -n "$ir" ] || { echo "remote_instructions: no $f in the profile" >&2; exit 1; }
		echo "$label,$p,$f,$(( ir / calls ))"
	done
done
