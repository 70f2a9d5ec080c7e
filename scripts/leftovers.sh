#!/bin/sh
# What the integration suites left behind: a test server still running
# (etcd, redis-server, pebble, tsec-broker, s3rver) or an entry of the
# temporary folder made after MARKER (a folder, a socket, a file) under
# a name the project's tests use.  The
# tests start their servers themselves and must always stop them and
# remove their folders, failing or not.  CI runs this after `make test`.
#
#   scripts/leftovers.sh MARKER      exit 1 and list them, 0 when clean
#   scripts/leftovers.sh --self-test plants one of each and checks that
#                                    the check above fails on them
set -u
tmp=${TMPDIR:-/tmp}

check() {
	marker=$1 bad=0
	for p in etcd redis-server pebble tsec-broker; do
		if pgrep -x "$p" >/dev/null; then
			echo "leftovers: $p still running:"; pgrep -a -x "$p"; bad=1
		fi
	done
	if pgrep -f '[s]3rver' >/dev/null; then
		echo "leftovers: s3rver still running:"; pgrep -a -f '[s]3rver'; bad=1
	fi
	# Names the project's tests and tools make (tsec-*, mktemp's tmp.*,
	# Go's Test*, go-build*): the machine's own files are not ours.
	new=$(find "$tmp" -mindepth 1 -maxdepth 1 -newer "$marker" ! -path "$marker" \
		\( -name 'tsec*' -o -name 'tmp.*' -o -name 'Test*' -o -name 'go-build*' \
		-o -name '*.sock' \) 2>/dev/null)
	if [ -n "$new" ]; then
		echo "leftovers: made in $tmp during the run and not removed:"
		echo "$new" | sed 's/^/  /' | head -n 50
		bad=1
	fi
	return $bad
}

if [ "${1:-}" = --self-test ]; then
	# In a temporary folder of its own, so that nothing else on the
	# machine decides the answer.
	d=$(mktemp -d)
	tmp=$d/tmp
	mkdir "$tmp"
	touch "$d/marker"
	trap 'kill "$pid" 2>/dev/null; rm -rf "$d"' EXIT
	cp /bin/sleep "$d/etcd"
	"$d/etcd" 60 &
	pid=$!
	if check "$d/marker" >/dev/null; then
		echo "leftovers: self-test: a running 'etcd' went unreported"; exit 1
	fi
	kill "$pid"; wait "$pid" 2>/dev/null
	touch "$tmp/tsec-planted"
	if check "$d/marker" >/dev/null; then
		echo "leftovers: self-test: a planted file went unreported"; exit 1
	fi
	rm -f "$tmp/tsec-planted"
	if ! check "$d/marker"; then
		echo "leftovers: self-test: reported something with nothing left"; exit 1
	fi
	echo "leftovers: self-test ok (a server and a file planted were reported)"
	exit 0
fi
[ $# -eq 1 ] || { echo "usage: scripts/leftovers.sh MARKER | --self-test" >&2; exit 2; }
check "$1" && echo "leftovers: none"
