#!/bin/sh
# Instructions one renewal turn costs tsec-broker, counted by callgrind
# (exact, whatever else the machine does): bench_turn's broker turn over
# ipc (lock.acquire, store.exists of three keys, store.load_cert,
# store.save_cert, lock.release) against a broker run under callgrind,
# once for N turns and once for 2N; the difference divided by N is one
# turn, start, seeding and stop cancelled out.  Printed: the whole
# process, and the part of it spent in jansson, in libsodium, in libc and
# in libzmq (each library's own instructions, not what it calls), with its
# share of the turn.
#
#   perf/turn_instructions.sh [BUILD_DIR] [N]   (build/release, 200)
set -eu
b=${1:-build/release}
n=${2:-200}
command -v valgrind >/dev/null || { echo "turn_instructions: needs valgrind" >&2; exit 2; }
W=${KEEP_DIR:-$(mktemp -d)}
trap '[ -n "${KEEP_DIR:-}" ] || rm -rf "$W"' EXIT
run() {
	BENCH_ONLY=broker BENCH_SIDES=ipc BENCH_BROKER_CALLGRIND="$W/cg.$1" \
		"$b/bench_turn" "$1" > "$W/out.$1"
}
# self FILE PATTERN: instructions of the objects whose name matches
# PATTERN ("" = the whole process)
self() {
	if [ -z "$2" ]; then
		callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
	else
		callgrind_annotate --threshold=100 "$1" 2>/dev/null |
			awk -v pat="$2" '/^ *[0-9,]+ / && $0 ~ pat { x = $1; gsub(",", "", x); s += x } END { print s + 0 }'
	fi
}
run "$n"
run $((n * 2))
whole=$(( ($(self "$W/cg.$((n * 2))" "") - $(self "$W/cg.$n" "")) / n ))
echo "part,turns,instructions_per_turn,share"
echo "whole_process,$n,$whole,1.000"
for part in libjansson libsodium libc.so libzmq; do
	a=$(self "$W/cg.$n" "\\[[^]]*$part")
	c=$(self "$W/cg.$((n * 2))" "\\[[^]]*$part")
	per=$(( (c - a) / n ))
	echo "$part,$n,$per,$(awk -v p="$per" -v w="$whole" 'BEGIN { printf "%.3f", p / w }')"
done
