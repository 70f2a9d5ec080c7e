#!/bin/sh
# Runs each test binary given (under $VALGRIND when set), each within
# $TEST_TIMEOUT seconds (default 900), then prints one closing line
# "DIR: N passed, N failed" for the build directory $1.
#
# A suite still running at its deadline is named as hung, and before it
# is killed every thread of it and of each process under it (a broker it
# started, a command it ran) is shown with its stack, where gdb is
# installed: a hang on a machine nobody can log in to says where it was.
b=$1; shift
pass=0; fail=0; failed=""
limit=${TEST_TIMEOUT:-900}

# The processes under $1, deepest last.
below() {
	for c in $(pgrep -P "$1" 2>/dev/null); do
		echo "$c"
		below "$c"
	done
}

stacks() {
	for p in "$1" $(below "$1"); do
		[ -r /proc/"$p"/cmdline ] || continue
		echo "--- pid $p: $(tr '\0' ' ' < /proc/"$p"/cmdline 2>/dev/null | cut -c1-200)"
		if command -v gdb > /dev/null; then
			timeout 60 gdb -p "$p" -batch -nx -ex 'thread apply all bt' 2>&1 |
				grep -E '^(Thread|#)' | head -200
		fi
	done
}

# A suite runs in the background (so the watchdog can look at it), where
# a non-interactive shell ignores ^C: an interrupt of this script ends
# the suite, what it started and the watchdog too.
pid= dog=
stop_all() {
	[ -n "$pid" ] && kill -STOP "$pid" 2>/dev/null
	for p in $(below "${pid:-0}") $pid $dog; do kill -KILL "$p" 2>/dev/null; done
	exit 130
}
trap stop_all INT TERM

for t in "$@"; do
	${VALGRIND:-} "$t" &
	pid=$!
	# The watchdog: one look a second, the suite's own pace otherwise.
	(
		n=0
		while kill -0 "$pid" 2>/dev/null && [ "$n" -lt "$limit" ]; do
			sleep 1
			n=$((n + 1))
		done
		if kill -0 "$pid" 2>/dev/null; then
			# Stopped first, so that it starts nothing new meanwhile.
			kill -STOP "$pid" 2>/dev/null
			echo "HUNG: $(basename "$t") did not finish in $limit s; its stacks:"
			stacks "$pid"
			for p in $(below "$pid") "$pid"; do
				kill -KILL "$p" 2>/dev/null
			done
		fi
	) &
	dog=$!
	wait "$pid"
	rc=$?
	kill "$dog" 2>/dev/null
	wait "$dog" 2>/dev/null
	if [ "$rc" -eq 0 ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		if [ "$rc" -eq 137 ]; then
			failed="$failed $(basename "$t")(hung or killed)"
		elif [ "$rc" -gt 128 ]; then
			echo "KILLED: $(basename "$t") died of signal $((rc - 128)) (13 is SIGPIPE, 6 SIGABRT)"
			failed="$failed $(basename "$t")(signal $((rc - 128)))"
		else
			failed="$failed $(basename "$t")(exit $rc)"
		fi
	fi
done
[ -n "$failed" ] && echo "failed in $b:$failed"
echo "$b: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
