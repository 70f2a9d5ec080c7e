#!/bin/sh
# make chaos-mutants: the chaos checker (tests/chaos_check.c), tested by
# mutation of the storage code it watches (issue 48, item 8).  In a
# scratch copy of the tree (its sources and its debug build, so that only
# what a mutant changes is rebuilt), each fault class is planted in turn
# into the product code, test_chaos runs on the backend that code serves,
# and the run must fail naming the fault:
#
#   dropped_write   every second fenced put a holder may make
#                   acknowledged and dropped (the redis script,
#                   broker/storage/redis/redis_scripts.h)
#   stale_cache     the LocalCache ignores the feed's per-key
#                   invalidations (broker/storage/localcache.c)
#   unfenced_write  a fenced put written unfenced (txn.c)
#   second_holder   an etcd acquire taken whether the lock is held or not
#                   (broker/storage/etcd/etcd_lock.c)
#   fence_back      redis hands out fences up to 7 s below the last
#                   (broker/storage/redis/redis_scripts.h)
#
# A mutant whose text no longer stands in its file fails too (update it
# here when that code changes).  Usage: sh scripts/chaos-mutants.sh
# [SECONDS], from the source tree, after `make MODE=debug build`.
set -u
secs=${1:-${CHAOS_MUTANT_SECONDS:-8}}
top=$(pwd)
work=$(mktemp -d /tmp/tsec-mutants-XXXXXX)
[ -n "${CHAOS_MUTANTS_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT INT TERM
fails=0

# The tree, timestamps kept: the build is newer than every source.
git ls-files -z | (cd "$top" && xargs -0 cp -p --parents -t "$work") || exit 1
mkdir -p "$work/build" && cp -a build/debug "$work/build/" || exit 1
(cd "$work" && make -s MODE=debug build/debug/tests/test_chaos >/dev/null) || {
	echo "chaos-mutants: the scratch tree does not build"; exit 1; }

# run_until_seen CASE NAME: runs the chaos case up to $runs times (the
# workers' and faults' seeds are fixed; their timing is not, so each run
# interleaves differently) until it fails, the fault seen; false when
# every run passed.  A fault that shows only when a stale cached read
# meets a peer's write (stale_cache) went unseen in one 8 s run of a
# clean-clone CI run (278 of its gets failed under the faults); three
# runs that all miss it are a checker that does not see it.
runs=3
run_until_seen() {
	i=0
	while [ "$i" -lt "$runs" ]; do
		i=$((i + 1))
		(cd "$work" && CHAOS_SECONDS=$secs CHAOS_ONLY=$1 \
		 timeout 600 build/debug/tests/test_chaos) >"$work/$2.log" 2>&1 || return 0
	done
	return 1
}

# mutant NAME CASE WANT FILE OLD NEW: replaces OLD by NEW in FILE (once),
# runs the chaos case CASE, and wants a violation matching WANT (grep -E).
mutant() {
	name=$1 case=$2 want=$3 file=$4
	cp -p "$work/$file" "$work/$file.orig"
	if ! OLD=$5 NEW=$6 perl -0pi -e 's/\Q$ENV{OLD}\E/$ENV{NEW}/ or exit 3' "$work/$file"; then
		echo "FAIL: mutant $name: its text is no longer in $file (update scripts/chaos-mutants.sh)"
		fails=$((fails + 1))
		mv "$work/$file.orig" "$work/$file"
		return
	fi
	if ! (cd "$work" && make -s MODE=debug build/debug/tests/test_chaos) >"$work/$name.build" 2>&1; then
		echo "FAIL: mutant $name does not build: $(tail -3 "$work/$name.build")"
		fails=$((fails + 1))
	elif ! run_until_seen "$case" "$name"; then
		echo "FAIL: mutant $name: $case passed $runs times; the checker did not see the fault"
		grep -E '^chaos (etcd|redis|brokers)' "$work/$name.log" | sed 's/^/    /'
		fails=$((fails + 1))
	elif grep -Eq "chaos VIOLATION: ($want)" "$work/$name.log"; then
		echo "mutant $name: $case named it: $(grep -m1 -o 'chaos VIOLATION: [^(]*' "$work/$name.log" |
			sed 's/chaos VIOLATION: //')"
		grep -E '^chaos (etcd|redis|brokers)' "$work/$name.log" | sed 's/^/    /'
	else
		echo "FAIL: mutant $name: $case failed without naming \"$want\":"
		grep -E 'VIOLATION|ERROR|FAILED' "$work/$name.log" | head -5 | sed 's/^/    /'
		fails=$((fails + 1))
	fi
	mv "$work/$file.orig" "$work/$file"
	touch "$work/$file"              # rebuilt unmutated for the next
}

mutant dropped_write test_chaos_redis \
	'a read older than an acknowledged write|an acknowledged write lost' \
	broker/storage/redis/redis_scripts.h \
	'	"  if o ~= '"'"'OK'"'"' then return o end\n"' \
	'	"  if o ~= '"'"'OK'"'"' then return o end\n"
	"  if redis.call('"'"'INCR'"'"', P..'"'"'/mutant'"'"') % 2 == 0 then return '"'"'OK'"'"' end\n"'
mutant stale_cache test_chaos_redis_cached \
	'a read older than an acknowledged write|a read older than one read before it' \
	broker/storage/localcache.c \
	'void tsec__localcache_invalidate(void *cache, const char *key)
{
	struct cache *c = cache;
' 'void tsec__localcache_invalidate(void *cache, const char *key)
{
	struct cache *c = cache;

	if (key)
		return;
'
mutant unfenced_write test_chaos_redis \
	'a write accepted from a holder that no longer held the lock' \
	broker/storage/txn.c '	rc = s->be->ops->put_many(s->be, bp, all, f, gd, err);' \
	'	rc = s->be->ops->put_many(s->be, bp, all, NULL, gd, err);
	(void)f;'
mutant second_holder test_chaos_etcd \
	"a grant while the previous holder's lease was valid|one fence granted twice" \
	broker/storage/etcd/etcd_lock.c \
	'	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "CREATE", "EQUAL",
						  tsec__jnum(0)));' \
	'	json_array_append_new(cmp, tsec__etcd_cmp(k->l, k->ln, false, "CREATE", "GREATER",
						  tsec__jnum(-1)));'
mutant fence_back test_chaos_redis \
	'a grant below a fence already granted' \
	broker/storage/redis/redis_scripts.h \
	'	"if f < now then f = now end\n"' \
	'	"if f < now then f = now end\n"
	"f = f - (string.byte(token, 1) % 8) * 1000000\n"'

if [ "$fails" -ne 0 ]; then
	echo "chaos-mutants: $fails of 5 faults went unnamed"
	exit 1
fi
echo "chaos-mutants: each of 5 faults planted in the storage code was named"
