#!/bin/sh
# A change of compiler flags rebuilds (issue 37, item 4): objects depend
# on BUILD/.flags, which holds the flags that built them.  Run in a
# build root of its own (BUILD_ROOT), one small object, so the tree's
# own builds are untouched.  Before the stamp, `make -q` called the
# object up to date under new flags (step 2 failed).
set -u
W=$(mktemp -d /tmp/tsec-flags-XXXXXX)
trap 'rm -rf "$W"' EXIT
O=$W/debug/obj/common/error.o
fails=0
# Run from `make check`, the environment carries the outer make's
# variables (MAKEFLAGS holds SANITIZE=... in the sanitizer build, which
# would name another build folder): start from a clean make environment
# and say every variable that picks the folder or the flags.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES CFLAGS LDFLAGS SANITIZE CC
mk() { make -s --no-print-directory BUILD_ROOT="$W" MODE=debug SANITIZE= "$@"; }
step() { echo "$1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }

mk "$O" || { echo "FAIL: first build"; exit 1; }
mk -q "$O" || bad "1: up to date right after building"
step "1: built, up to date"
mk -q CFLAGS=-DTSEC_FLAGS_PROBE "$O" && bad "2: new CFLAGS left the object up to date"
step "2: new CFLAGS: out of date"
mk CFLAGS=-DTSEC_FLAGS_PROBE "$O" || bad "3: build with new CFLAGS"
mk -q CFLAGS=-DTSEC_FLAGS_PROBE "$O" || bad "3: up to date under the flags that built it"
step "3: rebuilt, up to date under them"
mk -q "$O" && bad "4: back to the old flags left the object up to date"
step "4: old flags again: out of date"
grep -q -- '-DTSEC_FLAGS_PROBE' "$W/debug/.flags" && bad "4: the stamp kept the probe's flags"
if [ "$fails" -ne 0 ]; then
	echo "$fails failed"
	exit 1
fi
echo "test_build_flags: 4 passed"
