#!/bin/sh
# docs/HACKING.md's folder map against the tree (issue 37, item 4): every
# folder of the tree is on the map, every folder on the map exists.  And
# one rule of the house: nothing sleeps but common/clock.c.
# Data folders (tests/data/*, tests/fuzz/corpus/*, perf/results/*) are
# covered by their parent's line.  Run from the top of the tree.
set -u
doc=docs/HACKING.md
[ -r "$doc" ] || { echo "FAIL: no $doc"; exit 1; }
tree=$(mktemp)
map=$(mktemp)
trap 'rm -f "$tree" "$map"' EXIT
# The tree: the folders git tracks (what a clone has; not build/ or the
# var/ of make run), or, outside a checkout, what find sees.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files | sed -n 's|/[^/]*$||p' | while IFS= read -r d; do
		# Each folder and its parents.
		while [ -n "$d" ]; do echo "$d"; case $d in */*) d=${d%/*} ;; *) d= ;; esac; done
	done
	echo .
else
	find . \( -path ./build -o -path ./.git -o -name node_modules -o -path ./var \) -prune \
		-o -type d -print | sed 's|^\./||'
fi | grep -v -e '^tests/data/.' -e '^tests/fuzz/corpus/.' -e '^perf/results/.' |
	sed 's|^\.$|.|; s|$|/|; s|^\./$|./|' | sort -u > "$tree"
# The map: the first column of the table, `folder/`.
sed -n 's/^| `\([^`]*\/\)` |.*/\1/p' "$doc" | sort -u > "$map"
fails=0
for d in $(comm -23 "$tree" "$map"); do
	echo "FAIL: $d is in the tree but not on the map of $doc"; fails=$((fails + 1))
done
for d in $(comm -13 "$tree" "$map"); do
	echo "FAIL: $doc maps $d, which is not in the tree"; fails=$((fails + 1))
done
# One sleep helper (common/clock.c): a private sleep would bypass the
# injected clock (issue 37, item 3).
for f in $(grep -rlE '\b(nanosleep|usleep|clock_nanosleep)\(|[^_]sleep\(' \
		--include='*.c' broker common module verifier 2>/dev/null); do
	[ "$f" = common/clock.c ] && continue
	echo "FAIL: $f sleeps on its own; use tsec__nap_ms/_ns or tsec__sleep_ns (common/clock.h)"
	fails=$((fails + 1))
done
# Every condition the compiler knows (TSEC_CONDITIONS in types.h, and the
# known[] lists of module/rule.c for the conditions inside them) is
# documented in docs/policy.md and tinysecurity-policy(5); each has its
# reader in rule.c.
conds=$( { awk '/static const char \*const known\[\] = \{/ { on = 1 } on { print } on && /\};/ { on = 0 }' \
		module/rule.c
	awk '/^#define TSEC_CONDITIONS\(X\)/ { on = 1; next } on && /^	X\(/ { print } on && !/\\$/ { on = 0 }' \
		include/tinysecurity/types.h | cut -d, -f2; } | grep -o '"[a-z_]*"' | tr -d '"')
for id in $(awk '/^#define TSEC_CONDITIONS\(X\)/ { on = 1; next } on && /^	X\(/ { print } on && !/\\$/ { on = 0 }' \
		include/tinysecurity/types.h | sed 's/^	X(\([a-z_]*\),.*/\1/'); do
	grep -q "^static int when_$id(" module/rule.c ||
		{ echo "FAIL: the condition $id has no reader when_$id in module/rule.c"; fails=$((fails + 1)); }
done
[ "$(echo "$conds" | grep -c .)" -ge 10 ] ||
	{ echo "FAIL: found only $(echo "$conds" | grep -c .) conditions in module/rule.c"; fails=$((fails + 1)); }
for c in $conds; do
	grep -q "\`$c\`" docs/policy.md ||
		{ echo "FAIL: docs/policy.md does not name the condition $c"; fails=$((fails + 1)); }
	grep -q "^\.B $c\$" packaging/tinysecurity-policy.5 ||
		{ echo "FAIL: tinysecurity-policy(5) does not name the condition $c"; fails=$((fails + 1)); }
done
# Sizes a reader can hold (issue 37, item 3): no source file over 800
# lines, no function over 100 (from its opening brace in column 0 to its
# closing one).
for f in $(find broker common module verifier perf -name '*.c' | sort); do
	n=$(wc -l < "$f")
	[ "$n" -le 800 ] || { echo "FAIL: $f has $n lines (at most 800)"; fails=$((fails + 1)); }
	long=$(awk '/^[a-z].*\(/ { name = $0 } /^\{/ { start = NR } /^\}/ && start {
			if (NR - start > 100) printf "%s:%d %s (%d lines)\n", FILENAME, start, name, NR - start
			start = 0 }' "$f")
	[ -z "$long" ] || { echo "FAIL: a function over 100 lines: $long"; fails=$((fails + 1)); }
done
# The tiers (issue 53, item 2): storage includes nothing above it (no
# header of the bus's inside, the daemon, the remote store, the cache,
# the client or the CLI), and above storage only store_above.h is
# included, never the store's struct (store_private.h) or the backend
# contract (backend.h), save the daemon's configuration, which reads
# the backends' capabilities to check a "storage" section.
for f in $(find broker/storage -name '*.[ch]'); do
	grep -Hn '#include "broker/' "$f" | grep -v '#include "broker/storage/' |
		sed 's/^/FAIL: storage includes above it: /' | grep . && fails=$((fails + 1))
done
for f in $(find broker common module verifier -name '*.[ch]' -not -path 'broker/storage/*'); do
	case $f in broker/daemon/config.c) continue ;; esac
	grep -Hn '#include "broker/storage/\(store_private\|backend\)\.h"' "$f" |
		sed 's/^/FAIL: the store'"'"'s inside included above storage: /' | grep . &&
		fails=$((fails + 1))
done
# The file map of docs/architecture.md names every source file and
# every public header (issue 53, item 4: four files and remote.h were
# missing, and nothing said so).
for f in $(git ls-files broker common module verifier 2>/dev/null | grep '\.c$') \
	 $(git ls-files include 2>/dev/null | grep '\.h$'); do
	grep -q "\`$(basename "$f")\`" docs/architecture.md ||
		{ echo "FAIL: docs/architecture.md's map does not name $f"; fails=$((fails + 1)); }
done
# Every action of TSEC_ACTIONS (types.h) is in each place that lists the
# actions for a policy author, written out or in a family's a|b|c form
# (issue 53, item 4: lists kept by hand drift).
for a in $(sed -n 's/^[[:space:]]*X([A-Z_]*, "\([a-z]*\.[a-z_]*\)".*/\1/p' include/tinysecurity/types.h); do
	fam=${a%%.*}; verb=${a#*.}
	for doc in docs/policy.md packaging/tinysecurity-policy.5 packaging/tsec.1 broker/cli/tsec.c; do
		grep -Eq "(^|[^a-z_])$fam\\.([a-z_]+[|])*$verb([^a-z_]|\$)" "$doc" ||
			{ echo "FAIL: $doc does not list the action $a"; fails=$((fails + 1)); }
	done
done
# Every harness runs in `make fuzz`, from seeds of its own (issue 52,
# item 8): a harness left out of FUZZERS is never run, by CI or anyone.
fuzzers=$(sed -n '/^FUZZERS :=/,/[^\\]$/p' Makefile | sed 's/^FUZZERS :=//; s/\\//g')
for f in tests/fuzz/fuzz_*.c; do
	h=$(basename "$f" .c); h=${h#fuzz_}
	case " $(echo $fuzzers) " in
	*" $h "*) ;;
	*) echo "FAIL: $f is not in the Makefile's FUZZERS"; fails=$((fails + 1)) ;;
	esac
	[ -n "$(ls "tests/fuzz/corpus/$h" 2>/dev/null)" ] ||
		{ echo "FAIL: $f has no seeds in tests/fuzz/corpus/$h"; fails=$((fails + 1)); }
done
# Test files a reader can hold too (issue 53, item 7: ten were over 800
# lines, test_remote.c 1,977): none over 1,200; split by job, the shared
# setup in a harness (tests/*_harness.c).
for f in tests/*.c; do
	n=$(wc -l < "$f")
	[ "$n" -le 1200 ] || { echo "FAIL: $f has $n lines (a test file at most 1,200)"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ] || { echo "$fails failed"; exit 1; }
echo "test_hacking: $(echo $fuzzers | wc -w) fuzz harnesses, each in make fuzz with seeds"
echo "test_hacking: $(wc -l < "$map") folders mapped, as in the tree"
