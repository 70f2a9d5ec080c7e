#!/bin/sh
# Runs each test binary given (under $VALGRIND when set), then prints one
# closing line "DIR: N passed, N failed" for the build directory $1.
b=$1; shift
pass=0; fail=0; failed=""
for t in "$@"; do
	if ${VALGRIND:-} "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed="$failed $(basename "$t")"; fi
done
[ -n "$failed" ] && echo "failed in $b:$failed"
echo "$b: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
