#!/bin/sh
# certmagic's own FileStorage (A) against tsecstorage through tsec-broker
# (B, file backend with its LocalCache), A-B-B-A in one process
# (perf/go/certmagic_bench): Store, Load, Exists and List of a 6 KiB
# certificate set, Lock+Unlock, and a whole renewal turn.
#
#   make bench-certmagic               (4,000 runs; CSV under perf/results/)
#   perf/certmagic.sh BUILD_DIR RUNS [RAW.csv] [GATE%]
#
# With GATE (make bench-certmagic: 10), the run fails when a side's speed
# drifted more than GATE% within it: its ratios would be no evidence.
#
# Runs with the Go environment make sets (GOPATH with the link to
# bindings/go, CGO flags for BUILD_DIR).  Both sides write in the same
# file system.  FileStorage writes with os.WriteFile: no fsync, no
# atomic rename; the broker's file backend does both (its crash promise),
# so a write on B pays what A skips.
set -eu
build=$(cd "${1:-build/release}" && pwd)
n=${2:-4000}
raw=${3:-}
gate=${4:-0}
work=$(mktemp -d /tmp/tsec-cmbench-XXXXXX)
pid=
cleanup() {
	set +e
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
go build -o "$work/certmagic_bench" tinysecurity.dev/certmagic_bench
"$build/tsec" keygen --curve "$work/server" > /dev/null
"$build/tsec" keygen --curve "$work/bench" > /dev/null
cat > "$work/policy.json" <<JSON
{"version": 1, "rules": [
 {"id": "bench", "effect": "allow", "principal": ["svc:bench"],
  "action": ["storage.*", "lock.*"], "resource": ["certificates/**", "locks/*"]}]}
JSON
for try in 1 2 3; do
	port=$(shuf -i 20000-32000 -n 1)
	(umask 077 && cat > "$work/broker.json") <<JSON
{"module": "$build/libtinysecurity_module.so", "policy": "$work/policy.json",
 "allow_unsigned_policy": true,
 "storage": {"backend": "file", "root": "$work/store", "cache_bytes": 16777216},
 "endpoints": ["tcp://127.0.0.1:$port"], "server_secret_key": "$(cat "$work/server.key")",
 "clients": [{"public_key": "$(cat "$work/bench.pub")", "principal": "svc:bench"}]}
JSON
	"$build/tsec-broker" --config "$work/broker.json" 2> "$work/broker.err" &
	pid=$!
	i=0
	until TSEC_KEY="$work/bench" TSEC_SERVER_KEY="$work/server.pub" \
		TSEC_ENDPOINT="tcp://127.0.0.1:$port" "$build/tsec" health --timeout-ms 500 \
		> /dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || break
		i=$((i + 1)); [ $i -lt 100 ] || break
	done
	kill -0 "$pid" 2>/dev/null && break
	pid=
	[ $try -lt 3 ] || { echo "certmagic.sh: tsec-broker did not start:" >&2; cat "$work/broker.err" >&2; exit 1; }
done
mkdir "$work/filestorage"
"$work/certmagic_bench" -endpoint "tcp://127.0.0.1:$port" -server-key "$work/server.pub" \
	-key "$work/bench" -dir "$work/filestorage" -n "$n" -gate "$gate" > "$work/out.csv" ||
	{ grep -E "^(ratio|floor|gate)" "$work/out.csv" | column -t -s, >&2; exit 1; }
if [ -n "$raw" ]; then
	mkdir -p "$(dirname "$raw")"
	{ echo "# $(date -u +%FT%TZ) $(uname -n) $(go version) rounds=$n build=$build"; cat "$work/out.csv"; } > "$raw"
fi
grep -E "^(ratio|floor|gate)" "$work/out.csv" | column -t -s,
