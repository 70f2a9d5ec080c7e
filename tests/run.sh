#!/bin/sh
# Runs each test binary given (under $VALGRIND when set), each within
# $TEST_TIMEOUT seconds (default 900; a suite that takes longer is killed
# and named as hung), then prints one closing line "DIR: N passed, N
# failed" for the build directory $1.
b=$1; shift
pass=0; fail=0; failed=""
for t in "$@"; do
	timeout -k 10 "${TEST_TIMEOUT:-900}" ${VALGRIND:-} "$t"
	rc=$?
	if [ "$rc" -eq 0 ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
			echo "HUNG: $(basename "$t") did not finish in ${TEST_TIMEOUT:-900} s (killed)"
			failed="$failed $(basename "$t")(hung)"
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
