#!/bin/sh
# Instructions a Check of one request costs tsec-broker, counted by
# callgrind (exact, whatever else the machine does): the broker runs under
# callgrind twice, answering N and then 2N calls from bench_calls over
# ipc, and the difference divided by N is one call, start and stop
# cancelled out.  Printed: the whole process (user space: the broker's
# code, jansson, ZeroMQ, libc), and, inclusive, tsec__dispatch_fast (one Check
# reading the request, deciding, logging, writing the reply),
# tsec__log_decision (the decision-log line, written and queued; the
# writer thread's batched writev is not in it) and tsec_endpoint_check (the
# bus and the module).
#
#   perf/broker_instructions.sh [BUILD_DIR] [N]   (build/release, 2000)
set -eu
b=${1:-build/release}
n=${2:-2000}
command -v valgrind >/dev/null || { echo "broker_instructions: needs valgrind" >&2; exit 2; }
W=${KEEP_DIR:-$(mktemp -d)}
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "${KEEP_DIR:-}" ] || rm -rf "$W"' EXIT
mkdir -p "$W/run"
cat > "$W/broker.json" <<CFG
{"module": "$b/libtinysecurity_module.so", "policy": "examples/policy.json",
 "allow_unsigned_policy": true, "storage": "$W/store", "decision_log": "$W/decisions.log",
 "endpoints": ["ipc://$W/run/tsec.sock"],
 "ipc_uids": [{"uid": $(id -u), "principal": "svc:web-1", "roles": ["web"]}],
 "workers": 1}
CFG
# run CALLS: the broker's instructions (whole process) into $W/cg.CALLS
run() {
	rm -f "$W/run/tsec.sock"
	valgrind --tool=callgrind --callgrind-out-file="$W/cg.$1" \
		"$b/tsec-broker" --config "$W/broker.json" > "$W/broker.log" 2>&1 &
	pid=$!
	i=0
	until "$b/tsec" health --endpoint "ipc://$W/run/tsec.sock" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 600 ] || { echo "broker_instructions: the broker did not start" >&2; cat "$W/broker.log" >&2; exit 1; }
		kill -0 "$pid" 2>/dev/null || { cat "$W/broker.log" >&2; exit 1; }
		sleep 0.1
	done
	"$b/bench_calls" "ipc://$W/run/tsec.sock" "$1" >/dev/null
	kill -TERM "$pid"
	wait "$pid" || true
	pid=
}
# total FILE [FUNCTION]: inclusive instructions of FUNCTION (or all)
total() {
	if [ -z "${2:-}" ]; then
		callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
	else
		callgrind_annotate --threshold=100 --inclusive=yes "$1" 2>/dev/null |
			awk -v f="$2" '{ g = $0; sub(/^ *[0-9,]+ +(\([^)]*\) +)?/, "", g); split(g, a, " ");
				sub(/^[^:]*:/, "", a[1]) } a[1] == f { gsub(",", "", $1); if ($1 + 0 > s) s = $1 + 0 } END { print s + 0 }'
	fi
}
run "$n"
run $((n * 2))
echo "part,calls,instructions_per_call"
for part in "" tsec__dispatch_fast tsec__log_decision tsec_endpoint_check; do
	a=$(total "$W/cg.$n" "$part")
	c=$(total "$W/cg.$((n * 2))" "$part")
	echo "${part:-whole_process},$n,$(( (c - a) / n ))"
done
