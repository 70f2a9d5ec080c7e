#!/bin/sh
# Instructions per Check of two and per Evaluate through the bus, counted
# by callgrind (exact, and the same whatever else the machine does):
# bench_instructions runs N and 2N times, and the difference divided by N
# is what one call costs, loading and setup cancelled out.
#
#   perf/instructions.sh [BUILD_DIR] [POLICY] [N]
#     (defaults: build/release, examples/policy.json, 2000; MODULE=PATH
#     counts another module through the same program)
set -eu
b=${1:-build/release}
policy=${2:-examples/policy.json}
n=${3:-2000}
command -v valgrind >/dev/null || { echo "instructions: needs valgrind (sh scripts/deps.sh valgrind)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() { # count FUNCTION CALLS
	valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect="$1" \
		"$b/bench_instructions" "${MODULE:-$b/libtinysecurity_module.so}" "$policy" "$2" >/dev/null 2>&1
	callgrind_annotate "$out/cg" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}
echo "case,calls,instructions_per_call"
# By the endpoint's name (tsec_bus_check), then through its handle
# (tsec_endpoint_check, which the store and tsec-broker use).
for f in instr_check2 instr_evaluate instr_check2_handle instr_evaluate_handle; do
	a=$(count "$f" "$n")
	c=$(count "$f" $((n * 2)))
	echo "${f#instr_},$n,$(( (c - a) / n ))"
done
# A renewal turn on the memory backend, gated (through the store: key
# rules, policy, gates) and ungated (the backend's own operations), as
# bench_turn runs them: BENCH_ONLY=memory, N/10 and 2N/10 turns x 10.
turn() { # turn FUNCTION TURNS
	BENCH_ONLY=memory valgrind --tool=callgrind --callgrind-out-file="$out/cgt" \
		--toggle-collect="$1" "$b/bench_turn" "$2" >/dev/null 2>&1
	callgrind_annotate "$out/cgt" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}
t=$((n / 10 > 0 ? n / 10 : 1))
for f in turn_gated turn_ungated; do
	a=$(turn "$f" "$t")
	c=$(turn "$f" $((t * 2)))
	echo "${f}_memory,$((t * 10)),$(( (c - a) / (t * 10) ))"
done
