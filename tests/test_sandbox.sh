#!/bin/sh
# tsec-broker under the sandboxing its systemd unit ships with, and in
# the sandboxes that hide what it needs to judge a lock (issue 48, item
# 4).  The file store judges leases on the boot clock with the boot's id:
#
#   1. /proc mounted as the shipped unit has systemd mount it (its
#      ProcSubset= and ProtectProc= read from
#      packaging/tsec-broker.service.in): the broker starts, and a lock
#      record names this boot.  (With ProcSubset=pid the boot id read as
#      "-", and a lock left by a boot that had run 30 days stayed held
#      about 30 days after a reboot.)
#   2. /proc/sys hidden (ProcSubset=pid): the broker refuses to start,
#      and --check says why, rather than judge locks without a boot id.
#   3. A broker in a time namespace (its boot clock 1,000 s ahead) on the
#      same store as one outside: neither takes the other's live lock
#      (it took it at once).
#
# Needs root (mount and time namespaces); skipped otherwise, saying so.
# Built into BUILD/tests/test_sandbox (BUILD substituted).
set -u
B=@B@
T=$B/tsec
unit=packaging/tsec-broker.service.in
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
	echo "test_sandbox: SKIP (needs root and unshare for mount and time namespaces)"
	exit 0
fi
W=$(mktemp -d /tmp/tsec-sandbox-XXXXXX)
pids=
# Every broker this test started is stopped, and the test fails if one
# outlives it (a broker run through a shell function once did: $! named
# the function's subshell, not the broker).
cleanup() {
	rc=$?
	for p in $pids; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	n=0
	while [ $n -lt 100 ] && pgrep -f "tsec-broker --config $W/" >/dev/null; do
		sleep 0.1
		n=$((n + 1))
	done
	if pgrep -f "tsec-broker --config $W/" >/dev/null; then
		echo "FAIL: a broker outlived the test:"
		pgrep -a -f "tsec-broker --config $W/"
		pkill -KILL -f "tsec-broker --config $W/"
		rc=1
	fi
	rm -rf "$W"
	exit $rc
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

printf '%s\n' '{"revision": 1, "version": 1, "rules": [{"id": "all", "effect": "allow",
 "principal": ["svc:app"], "action": ["*"], "resource": ["**"]}]}' > "$W/policy.json"
# config NAME: a broker on the shared store, its socket $W/NAME.sock.
config() {
	cat > "$W/$1.json" <<EOF
{"module": "$B/libtinysecurity_module.so", "policy": "$W/policy.json",
 "allow_unsigned_policy": true, "state_dir": "$W",
 "storage": {"backend": "file", "root": "$W/store"},
 "endpoints": ["ipc://$W/run-$1/b.sock"],
 "ipc_uids": [{"uid": 0, "principal": "svc:app"}]}
EOF
}
# start NAME PREFIX...: the broker NAME run under the command PREFIX, in
# the background; waits until it answers (or ends).
start() {
	name=$1
	shift
	"$@" "$B/tsec-broker" --config "$W/$name.json" 2>"$W/$name.err" &
	pids="$pids $!"
	n=0
	while [ $n -lt 600 ] && kill -0 $! 2>/dev/null &&
	      ! TSEC_ENDPOINT=ipc://$W/run-$name/b.sock "$T" health >/dev/null 2>&1; do
		sleep 0.1
		n=$((n + 1))
	done
	TSEC_ENDPOINT=ipc://$W/run-$name/b.sock "$T" health >/dev/null 2>&1
}
at() { TSEC_ENDPOINT=ipc://$W/run-$1/b.sock; export TSEC_ENDPOINT; shift; "$T" "$@"; }

# The /proc options systemd mounts for the unit's settings.
opts=
grep -q '^ProcSubset=pid' "$unit" && opts=subset=pid
grep -q '^ProtectProc=invisible' "$unit" && opts=${opts:+$opts,}hidepid=invisible
unit_proc() {
	exec unshare -m --propagation private sh -c "mount -t proc -o '${opts:-defaults}' proc /proc &&
		exec \"\$@\"" sh "$@"
}

# 1. As the unit runs it.
config unit
if start unit unit_proc; then
	at unit lock acquire sandboxed --ttl-ms 60000 >/dev/null || fail "a lock under the unit's sandboxing"
	grep -q "^boot $(cat /proc/sys/kernel/random/boot_id)\$" "$W/store/.tsec-locks/sandboxed.lock" ||
		fail "the lock record under the unit's sandboxing does not name this boot"
else
	fail "the broker did not start under the unit's sandboxing (/proc: ${opts:-defaults}): $(tail -2 "$W/unit.err")"
fi

# 2. /proc/sys hidden: refused, and said why.
config hidden
out=$(unshare -m --propagation private sh -c "mount -t proc -o subset=pid proc /proc &&
	exec \"$B/tsec-broker\" --check --config \"$W/hidden.json\"" 2>&1)
rc=$?
[ $rc -ne 0 ] || fail "--check passed with /proc/sys hidden"
case $out in
*boot_id*) ;;
*) fail "--check with /proc/sys hidden did not say why: $out" ;;
esac
if start hidden unshare -m --propagation private sh -c "mount -t proc -o subset=pid proc /proc &&
	exec \"\$@\"" sh; then
	fail "the broker served with /proc/sys hidden"
fi

# 3. Two brokers on one store, one of them in a time namespace whose boot
#    clock reads 1,000 s ahead: neither takes the other's live lock.
config outside
config timens
start outside env || fail "the broker outside the time namespace did not start"
if start timens unshare -T --boottime 1000 --monotonic 1000; then
	at outside lock acquire held-out --ttl-ms 600000 >/dev/null || fail "lock outside"
	at timens lock acquire held-out --ttl-ms 600000 >/dev/null 2>&1 &&
		fail "a broker in a time namespace took a live lock taken outside it"
	at timens lock acquire held-in --ttl-ms 600000 >/dev/null || fail "lock inside"
	at outside lock acquire held-in --ttl-ms 600000 >/dev/null 2>&1 &&
		fail "a broker outside took a live lock taken in a time namespace"
else
	fail "the broker in a time namespace did not start: $(tail -2 "$W/timens.err")"
fi

[ $fails -eq 0 ] || { echo "test_sandbox: $fails failed"; exit 1; }
echo "test_sandbox: the unit's sandbox, /proc/sys hidden, a time namespace: ok"
