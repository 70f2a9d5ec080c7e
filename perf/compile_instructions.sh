#!/bin/sh
# Instructions to load and compile a policy of N and of 10N rules, counted
# by callgrind (exact: --toggle-collect=tsec_bus_load_file on
# bench_instructions, which loads the policy, then makes one call of
# each kind), and their ratio: issue 21 asks at most 10x per 10x rules.
# Two shapes, each rule with an id and a resource of one width (numbers
# zero-padded, so the policy's bytes grow exactly 10x):
#   distinct  certificates/dNNNNNN-*/**  (distinct prefix globs under one node)
#   deep      certificates/NNNNNN/x/*.crt
#
#   perf/compile_instructions.sh [BUILD_DIR] [N]   (build/release, 16000)
set -eu
b=${1:-build/release}
n=${2:-16000}
command -v valgrind >/dev/null || { echo "compile_instructions: needs valgrind" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# policy SHAPE RULES > FILE
policy() {
	awk -v n="$2" -v shape="$1" 'BEGIN {
		printf "{\"version\": 1, \"rules\": ["
		for (i = 0; i < n; i++) {
			r = shape == "distinct" ? sprintf("certificates/d%06d-*/**", i) \
						: sprintf("certificates/%06d/x/*.crt", i)
			printf "%s{\"id\": \"s%06d\", \"effect\": \"allow\", \"action\": [\"storage.load\"], \"resource\": [\"%s\"]}", (i ? "," : ""), i, r
		}
		print "]}"
	}'
}
count() { # count FILE
	valgrind --tool=callgrind --callgrind-out-file="$W/cg" --toggle-collect=tsec_bus_load_file \
		"$b/bench_instructions" "$b/libtinysecurity_module.so" "$1" 1 >/dev/null 2>&1
	callgrind_annotate "$W/cg" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}
echo "shape,rules,instructions,rules_10x,instructions_10x,ratio"
for shape in distinct deep; do
	policy $shape "$n" > "$W/a.json"
	policy $shape $((n * 10)) > "$W/b.json"
	a=$(count "$W/a.json")
	c=$(count "$W/b.json")
	echo "$shape,$n,$a,$((n * 10)),$c,$(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.3f", c / a }')"
done
