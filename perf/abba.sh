#!/bin/sh
# A-B-B-A comparison of two module builds through bench_bus.
#
#   perf/abba.sh MODULE_A.so MODULE_B.so [ROUNDS] [CALLS]
#
# Each round runs bench_bus on A, B, B, A (so drift on this shared
# machine hits both sides alike) and keeps each run's p50 of check2 and
# evaluate.  Prints every run as CSV, then the median p50 per side and the
# ratio B/A.  Build both modules in release first, e.g. keep a copy of
# build/release/libtinysecurity_module.so before a change.
set -eu
a=$1; b=$2; rounds=${3:-5}; calls=${4:-100000}
bench=${BENCH:-build/release/bench_bus}
policy=${POLICY:-examples/policy.json}
out=$(mktemp); trap 'rm -f "$out"' EXIT
run() {
	"$bench" "$2" "$policy" "$calls" 2>/dev/null |
		awk -F, -v side="$1" -v r="$3" '$1 == "latency" { print side "," r "," $2 "," $5 }'
}
echo "side,round,case,p50_ns"
i=1
while [ "$i" -le "$rounds" ]; do
	run A "$a" "$i"; run B "$b" "$i"; run B "$b" "$i"; run A "$a" "$i"
	i=$((i + 1))
done | tee "$out"
for c in check2 evaluate; do
	ma=$(awk -F, -v c=$c '$1 == "A" && $3 == c { print $4 }' "$out" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	mb=$(awk -F, -v c=$c '$1 == "B" && $3 == c { print $4 }' "$out" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	awk -v c=$c -v a="$ma" -v b="$mb" 'BEGIN { printf "# %s: median p50 A %d ns, B %d ns, B/A %.3f\n", c, a, b, b / a }'
done
