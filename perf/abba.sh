#!/bin/sh
# A-B-B-A comparison of two builds on any benchmark.
#
#   perf/abba.sh [-n RUNS] [-o RAW.csv] [-d DRIVER_DIR] DIR_A DIR_B PROGRAM [ARGS...]
#
# Runs PROGRAM ARGS once per side to warm both (discarded), then in four
# phases, A1 B1 B2 A2, RUNS times per phase (default 3), so drift on this
# shared machine hits both sides alike.
#
# One driver for both sides (issue 53, item 10): a PROGRAM linked to
# libtinysecurity.so (the benchmarks that use the public API) is run from
# one folder, DRIVER_DIR (default DIR_B), for both sides, with
# LD_LIBRARY_PATH and TSEC_BENCH_DIR naming the side's build folder: the
# side's library, module and tsec-broker are measured, never a
# difference between the two commits' benchmark programs.  A PROGRAM
# that links the code it measures (verify_module, the benchmarks that
# reach inside) runs each side's own, and the output says so.  An "@"
# at the start of an argument stands for the side's build folder, e.g.
#
#   perf/abba.sh old/build/release build/release \
#       bench_bus @/libtinysecurity_module.so examples/policy.json 100000
#   perf/abba.sh old/build/release build/release \
#       verify_module --csv --calls 2000 @/libtinysecurity_module.so
#
# The program prints the benchmarks' CSV: rows "case,sample,iterations,
# elapsed_ns,ns_per_op" (a case's value is ns_per_op) and rows
# "latency,case,samples,first,p50,p90,p99,p999,max" (cases CASE.p50 and
# CASE.p99).  For each case and phase the median of its values is taken;
# a side's figure is the mean of its two phase medians.  Drift is
# A2/A1 - 1 (and B2/B1 - 1 for the other side): 10% or more on either,
# the case is shown as excluded.  An effect (B/A - 1)
# under 5% is shown as unchanged.  Every case is shown; every value goes
# to RAW.csv (default: a file under perf/results/), after "#" lines that
# record the host, the date, the compiler, each side's build mode and
# the driver; each value is kept with the machine's load (the 1-minute
# average of /proc/loadavg) when its run began, and the summary says the
# load's range.
# Beside each side's figure, its spread: (max - min) / median of all its
# values, in percent.  Two sides of different build modes (release,
# debug, with or without sanitizers, read from each build folder's .flags
# stamp, or from verify_module --version) are refused: a ratio between
# them measures the modes, not the change.  Exit status 1 when a
# run of the program fails or prints no case, or when every case is
# excluded or missing on a side; 2 for bad usage or mixed modes.
set -eu
runs=3
raw=
driver=
while [ $# -gt 0 ]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-o) raw=$2; shift 2 ;;
	-d) driver=$2; shift 2 ;;
	-h|--help) sed -n '2,47p' "$0"; exit 0 ;;
	*) break ;;
	esac
done
if [ $# -lt 3 ]; then
	echo "usage: perf/abba.sh [-n RUNS] [-o RAW.csv] [-d DRIVER_DIR] DIR_A DIR_B PROGRAM [ARGS...]" >&2
	exit 2
fi
a=$1 b=$2 prog=$3
shift 3
for d in "$a" "$b"; do
	[ -x "$d/$prog" ] || { echo "abba: $d/$prog is not a program" >&2; exit 2; }
done
[ -n "$driver" ] || driver=$b
[ -x "$driver/$prog" ] || { echo "abba: $driver/$prog is not a program" >&2; exit 2; }
# One driver when the program takes the library from the side's folder.
if readelf -d "$driver/$prog" 2>/dev/null | grep -q 'NEEDED.*libtinysecurity\.so'; then
	how="one driver, $driver/$prog, over each side's library, module and tsec-broker"
else
	driver=
	how="each side's own $prog (it links the code it measures)"
fi
# mode DIR: release or debug, "+san"/"+tsan" when sanitized; "unknown"
# when the folder says neither (a build older than the .flags stamp and
# without verify_module).
mode() {
	if [ -r "$1/.flags" ]; then
		m=debug
		grep -q -- '-DNDEBUG' "$1/.flags" && m=release
		grep -q -- '-fsanitize=thread' "$1/.flags" && m=$m+tsan
		grep -q -- '-fsanitize=address' "$1/.flags" && m=$m+san
		echo "$m"
	elif [ -x "$1/verify_module" ]; then
		"$1/verify_module" --version 2>/dev/null |
			sed -n 's/.*(\([a-z]*\) build).*/\1/p' | grep . || echo unknown
	else
		echo unknown
	fi
}
mode_a=$(mode "$a") mode_b=$(mode "$b")
if [ "$mode_a" != "$mode_b" ] && [ "$mode_a" != unknown ] && [ "$mode_b" != unknown ]; then
	echo "abba: $a is a $mode_a build and $b a $mode_b build; compare builds of one mode" >&2
	exit 2
fi
[ -n "$raw" ] || raw=perf/results/abba-$prog-$(date +%Y%m%d-%H%M%S).csv
mkdir -p "$(dirname "$raw")"
{
	echo "# host: $(uname -n) $(uname -srm), $(nproc) cores"
	echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# compiler: $(${CC:-cc} --version 2>/dev/null | head -n 1)"
	echo "# A: $a ($mode_a build); B: $b ($mode_b build)"
	echo "# command: $prog $*"
	echo "# driver: $how"
	echo "phase,run,case,value,load"
} > "$raw"

# run PHASE DIR N: one run of the program for a side, values appended.
run() {
	phase=$1 dir=$2 n=$3
	set --
	for x in $args; do
		case $x in @*) set -- "$@" "$dir${x#@}" ;; *) set -- "$@" "$x" ;; esac
	done
	load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo -)
	if [ -n "$driver" ]; then
		LD_LIBRARY_PATH=$dir TSEC_BENCH_DIR=$dir "$driver/$prog" "$@" > "$out" 2> "$out.err"
	else
		"$dir/$prog" "$@" > "$out" 2> "$out.err"
	fi || {
		echo "abba: $prog for $dir failed in phase $phase, run $n:" >&2
		tail -n 5 "$out.err" >&2
		exit 1
	}
	[ "$phase" = warm ] && return 0
	before=$(wc -l < "$raw")
	awk -F, -v p="$phase" -v r="$n" -v l="$load" '
		$1 == "latency" && NF >= 7 { print p "," r "," $2 ".p50," $5 "," l; print p "," r "," $2 ".p99," $7 "," l; next }
		NF == 5 && $2 ~ /^[0-9]+$/ { print p "," r "," $1 "," $5 "," l }' "$out" >> "$raw"
	if [ "$(wc -l < "$raw")" -eq "$before" ]; then
		echo "abba: $dir/$prog printed no case in phase $phase, run $n" >&2
		exit 1
	fi
}
args=$*
out=$(mktemp)
trap 'rm -f "$out" "$out.err"' EXIT
run warm "$a" 0
run warm "$b" 0
for phase in A1 B1 B2 A2; do
	case $phase in A*) dir=$a ;; *) dir=$b ;; esac
	i=1
	while [ "$i" -le "$runs" ]; do
		run "$phase" "$dir" "$i"
		i=$((i + 1))
	done
done

echo "# A = $a ($mode_a), B = $b ($mode_b); $prog $args; $runs runs per phase; raw values: $raw"
echo "# $how"
awk -F, '/^#/ || $1 == "phase" || $5 == "-" { next }
	{ x = $5 + 0; if (!n++ || x < lo) lo = x; if (x > hi) hi = x }
	END { if (n) printf "# machine load (1-minute average) when the runs began: %.2f to %.2f on %s cores\n", lo, hi, c }' \
	c="$(nproc)" "$raw"
echo "# +-A, +-B: a side's spread, (max - min) / its figure, over all its runs"
awk -F, '/^#/ || $1 == "phase" { next }
{ k = $3 SUBSEP $1; n[k]++; v[k, n[k]] = $4; cases[$3] = 1
  s = $3 SUBSEP substr($1, 1, 1); x = $4 + 0
  if (!(s in lo) || x < lo[s]) lo[s] = x
  if (!(s in hi) || x > hi[s]) hi[s] = x }
function spread(c, side, mid,   s) {
	s = c SUBSEP side
	return mid > 0 ? (hi[s] - lo[s]) / mid * 100 : 0
}
function med(c, p,   k, m, i, j, t, x) {
	k = c SUBSEP p; m = n[k]
	if (!m) return -1
	for (i = 1; i <= m; i++) x[i] = v[k, i] + 0
	for (i = 2; i <= m; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
	return m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
}
END {
	printf "%-28s %12s %7s %12s %7s %8s %9s %9s  %s\n", "case", "A", "+-A", "B", "+-B", "B/A", "drift A", "drift B", "verdict"
	for (c in cases) {
		a1 = med(c, "A1"); a2 = med(c, "A2"); b1 = med(c, "B1"); b2 = med(c, "B2")
		if (a1 <= 0 || a2 <= 0 || b1 <= 0 || b2 <= 0) { printf "%-28s missing on a side\n", c; continue }
		judged++
		A = (a1 + a2) / 2; B = (b1 + b2) / 2; da = a2 / a1 - 1; db = b2 / b1 - 1; e = B / A - 1
		if (da >= 0.10 || da <= -0.10) verdict = sprintf("excluded (A drifted %+.1f%%)", da * 100)
		else if (db >= 0.10 || db <= -0.10) verdict = sprintf("excluded (B drifted %+.1f%%)", db * 100)
		else if (e < 0.05 && e > -0.05) verdict = "unchanged"
		else verdict = sprintf("%s %.1f%%", e < 0 ? "B faster by" : "B slower by", (e < 0 ? -e : e) * 100)
		if (verdict !~ /^excluded/) kept++
		printf "%-28s %12.1f %6.1f%% %12.1f %6.1f%% %8.3f %+8.1f%% %+8.1f%%  %s\n", c, A, spread(c, "A", A), B, spread(c, "B", B), B / A, da * 100, db * 100, verdict
	}
	if (!kept) { print "abba: every case excluded or missing on a side" > "/dev/stderr"; exit 1 }
}' "$raw" > "$out" || status=1
{ IFS= read -r head; echo "$head"; sort; } < "$out"
exit "${status:-0}"
