#!/bin/bash
# Every command line the documentation shows, run against a live broker
# (the example policy, file storage, as `make run` serves it):
#
#   - the tour in README.md, line by line, each with the exit status its
#     comment names (default 0), TOKEN the token its lock acquire printed;
#   - what `make run` suggests (scripts/run-broker.sh);
#   - an example of every form `tsec help CMD` shows, for every command
#     `tsec --commands` lists (a form without an example fails the test),
#     and every command tsec(1) describes.
#
# Built into BUILD/tests/test_docs (BUILD substituted); run from the
# source tree like every suite.  bash: the suggestions use <<<.
set -u
B=@B@
T=$B/tsec
W=$(mktemp -d /tmp/tsec-docs-XXXXXX)
chmod 700 "$W"
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$W"
}
trap cleanup EXIT

# The broker, configured as scripts/run-broker.sh does, in $W (without the
# ask listener, whose fixed port two runs side by side would share).
mkdir -p "$W/keys" "$W/run"
(umask 077 && head -c 32 /dev/urandom > "$W/keys/remote.key")
"$T" keygen --curve "$W/keys/server" >/dev/null &&
	"$T" keygen --curve "$W/keys/client" >/dev/null || { echo "keygen failed"; exit 1; }
esc() { printf '%s' "$1" | sed 's/[&|\\]/\\&/g'; }
sed -e "s|@UID@|$(id -u)|" \
    -e "s|@SERVER_SECRET@|$(esc "$(cat "$W/keys/server.key")")|" \
    -e "s|@CLIENT_PUBLIC@|$(esc "$(cat "$W/keys/client.pub")")|" \
    -e "s|@MODULE@|$(esc "$B/libtinysecurity_module.so")|" \
    -e "s|var/store|$W/store|; s|var/decisions.log|$W/decisions.log|" \
    -e "s|var/blobs|$W/blobs|; s|var/keys/remote.key|$W/keys/remote.key|" \
    -e "s|ipc://var/run/tsec.sock|ipc://$W/run/tsec.sock|" \
    -e "s|, \"tcp://127.0.0.1:5701\"||" \
    -e '/"ask":/d' \
    examples/broker.json > "$W/broker.json"
chmod 600 "$W/broker.json"      # it holds the broker's secret key
"$B/tsec-broker" --config "$W/broker.json" > "$W/broker.log" 2>&1 &
pid=$!
export TSEC_ENDPOINT="ipc://$W/run/tsec.sock"
# Until it answers (a condition, with a deadline far beyond need).
for i in $(seq 1 1200); do
	"$T" health >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { echo "tsec-broker exited:"; cat "$W/broker.log"; exit 1; }
	sleep 0.1
done
"$T" health >/dev/null || { echo "tsec-broker did not answer"; cat "$W/broker.log"; exit 1; }

fail=0 ran=0 TOKEN=none
# run WANT COMMAND: runs it (bash, in the source tree), wants exit WANT.
run() {
	local want=$1 cmd=$2 rc
	cmd=${cmd//TOKEN/$TOKEN}
	T=$T bash -c "$cmd" > "$W/out" 2>&1 < /dev/null
	rc=$?
	ran=$((ran + 1))
	if [ "$rc" != "$want" ]; then
		echo "FAIL (exit $rc, want $want): $cmd"
		sed 's/^/    /' "$W/out" | head -n 5
		fail=1
	fi
	# A lock acquire's token, for the commands after it.
	local t
	t=$(sed -n 's/^token  *"\([0-9a-f]*\)"$/\1/p' "$W/out")
	[ -n "$t" ] && TOKEN=$t
	return 0
}

# 1. README's tour: the shell block after "## A five-minute tour".
awk '/^## A five-minute tour/ { on = 1 } on && /^```sh/ { code = 1; next }
     code && /^```/ { exit } code' README.md |
	sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' > "$W/tour"
[ -s "$W/tour" ] || { echo "FAIL: no tour found in README.md"; fail=1; }
while IFS= read -r line; do
	case $line in ''|export*|T=*) continue ;; esac
	want=$(printf '%s' "$line" | sed -n 's/.*#.*exit \([0-9]\).*/\1/p')
	run "${want:-0}" "${line%%#*}"
done < "$W/tour"

# 1b. docs/policy.md's first policy: each command's exit status and, when
# its comment says 'TEXT', that TEXT in its output (issue 51: each of the
# four mistakes gets its explanation).
awk '/^## Your first policy/ { on = 1 } on && /^```sh/ { code = 1; next }
     code && /^```/ { exit } code' docs/policy.md |
	sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' > "$W/first"
[ "$(grep -c '^\$T' "$W/first")" -ge 7 ] ||
	{ echo "FAIL: no first policy walk-through in docs/policy.md"; fail=1; }
while IFS= read -r line; do
	case $line in ''|T=*) continue ;; esac
	want=$(printf '%s' "$line" | sed -n 's/.*#.*exit \([0-9]\).*/\1/p')
	says=$(printf '%s' "$line" | sed -n "s/.*#.* says '\(.*\)'\$/\1/p")
	run "${want:-0}" "${line%%#*}"
	if [ -n "$says" ] && ! grep -qF -- "$says" "$W/out"; then
		echo "FAIL (no '$says'): ${line%%#*}"
		sed 's/^/    /' "$W/out" | head -n 8
		fail=1
	fi
done < "$W/first"

# A denial says why not, in the reply and in the decision log (issue 20,
# defect 11: the broker said only "nothing allowed it").
"$T" check --action storage.store --size 100000 \
	--resource certificates/acme/example.com/example.com.json > "$W/out" 2>&1
grep -q "not applied: issuer-writes: .*size" "$W/out" ||
	{ echo "FAIL: a denial without its why-not:"; cat "$W/out"; fail=1; }
for i in $(seq 1 600); do
	grep -q '"why_not":\[{"rule":"issuer-writes"' "$W/decisions.log" 2>/dev/null && break
	sleep 0.1
done
grep -q '"why_not":\[{"rule":"issuer-writes"' "$W/decisions.log" ||
	{ echo "FAIL: the decision log has no why_not"; tail -n 3 "$W/decisions.log"; fail=1; }

# 2. What `make run` suggests.
sed -n 's/^  \$B\/tsec \(.*\)$/\1/p' scripts/run-broker.sh > "$W/suggested"
[ -s "$W/suggested" ] || { echo "FAIL: no suggestions in scripts/run-broker.sh"; fail=1; }
while IFS= read -r line; do
	want=0
	case $line in *storage.list*) want=1 ;; esac      # the floor denies
	run "$want" "\$T $line"
done < "$W/suggested"

# 3. An example of every form of every command (help CMD's usage lines).
C=certificates/acme/docs.example/docs.example
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj /CN=docs.example -addext subjectAltName=DNS:docs.example \
	-keyout "$W/docs.key" -out "$W/docs.crt" >/dev/null 2>&1 ||
	{ echo "openssl could not make a certificate"; exit 1; }
echo '{"sans": ["docs.example"]}' > "$W/docs.json"
sed 's/"version": 1,/"version": 1, "revision": 7,/' examples/policy.json > "$W/policy.json"
cat > "$W/examples" <<EOF
0 \$T check --action storage.load --resource $C.crt
1 \$T check --action storage.list --resource $C.key
0 \$T check --json --action storage.load --resource $C.crt
0 \$T check --policy examples/policy.json --principal svc:web-1 --role web --action storage.load --resource certificates/acme/example.com/example.com.crt
0 \$T eval --action storage.load --resource $C.crt
1 \$T eval --policy examples/policy.json --principal svc:web-1 --action storage.load --resource $C.key
0 \$T lint examples/policy.json
2 \$T lint tests/data/policy/invalid/037-unknown-action/policy.json
0 \$T test examples
0 \$T test --coverage -v --run '*lock*' --json examples/policy.test.json
0 \$T test --min-coverage 100 examples
0 \$T can --role web --policy examples/policy.json svc:web-1
1 \$T can --policy examples/policy.json svc:nobody
0 \$T lint - < examples/policy.json
0 \$T keygen --curve $W/k1
0 \$T keygen --sign $W/s1
2 \$T keygen --sign $W/s1
0 \$T keygen --sign $W/s1 --force
0 \$T sign --key $W/s1.sign.key $W/policy.json
0 \$T verify --key $W/s1.sign.pub $W/policy.json
0 \$T inspect --key $W/s1.sign.pub $W/policy.json
0 \$T fmt examples/policy.json
0 \$T fmt --check examples/policy.json
0 \$T store put $C.json $W/docs.json
0 \$T store put certificates/acme/docs.example/extra.json - <<< '{}'
0 \$T store get $C.json
0 \$T store ls certificates/acme
0 \$T store ls certificates -r
0 \$T store mv certificates/acme/docs.example/extra.json certificates/acme/docs.example/moved.json
0 \$T store rm certificates/acme/docs.example/moved.json
0 \$T lock acquire docs-lock --ttl-ms 30000 --wait-ms 1000
0 \$T lock renew docs-lock TOKEN --ttl-ms 30000
0 \$T lock release docs-lock TOKEN
0 \$T cert save acme docs.example $W/docs.crt $W/docs.key $W/docs.json
0 \$T cert load acme docs.example
0 \$T cert load acme docs.example $W/out-dir
1 \$T cert exists acme-remote never.example
0 \$T cert publish acme-remote docs.example $W/docs.crt $W/docs.key $W/docs.json
0 \$T cert exists acme-remote docs.example
0 \$T cert fetch acme-remote docs.example
0 \$T cert fetch acme-remote docs.example $W/fetched
0 \$T cert recover acme-remote docs.example
0 \$T cert archive acme-remote docs.example 2026-12
0 \$T cert sweep 0
0 \$T store rm certificates/acme/docs.example -r
0 \$T stats
0 \$T stats --prometheus
0 \$T health
0 \$T --json health
0 \$T reload
2 \$T policy publish $W/policy.json
0 \$T replay --policy examples/policy.json $W/decisions.log
1 \$T replay -v --policy $W/nofloor.json $W/decisions.log
0 \$T diff examples/policy.json examples/policy.json
1 \$T diff --log $W/decisions.log examples/policy.json $W/nofloor.json
0 \$T help check
0 \$T --version
EOF
mkdir -p "$W/out-dir" "$W/fetched"
# The example policy without its floors, for replay and diff.
sed '/^  "floor": \[/,/^  \],/c\  "floor": [],' examples/policy.json > "$W/nofloor.json"
grep -q '"floor": \[\],' "$W/nofloor.json" || { echo "FAIL: could not remove the floors"; fail=1; }
while read -r want line; do
	run "$want" "$line"
done < "$W/examples"
[ -s "$W/out-dir/docs.example.key" ] || { echo "FAIL: cert load DIR wrote no key"; fail=1; }
cmp -s "$W/fetched/docs.example.key" "$W/docs.key" ||
	{ echo "FAIL: cert fetch DIR did not write the published key"; fail=1; }

# Every form shown has an example: the usage lines of help CMD, split at
# " | ", each form's first word after the command (a sub-command or an
# option) must open some example.
for cmd in $("$T" --commands); do
	"$T" help "$cmd" | sed -n 's/^usage: tsec //p; s/^       tsec //p' |
		sed 's/ | /\n/g' | while IFS= read -r form; do
		set -- $form
		first=$1 sub=${2:-}
		[ "$first" = "$cmd" ] || { sub=$first; first=$cmd; }
		case $sub in ''|\[*|[A-Z]*) pat="\$T $cmd" ;; *) pat="\$T $cmd $sub" ;; esac
		grep -qF -- "$pat" "$W/examples" || echo "FAIL: no example of 'tsec $form' ($pat)"
	done
done > "$W/missing"
[ -s "$W/missing" ] && { cat "$W/missing"; fail=1; }
# ... and every command tsec(1) describes exists.
for cmd in $(sed -n '/^\.SH DESCRIPTION/,/^\.SH OPTIONS/s/^\.B[IR]* "*\([a-z]*\).*/\1/p' \
		packaging/tsec.1 | sort -u); do
	"$T" --commands | grep -qx "$cmd" || { echo "FAIL: tsec(1) describes '$cmd', tsec has none"; fail=1; }
done

# Every command is in operations.md's list of them (issue 51, item 17:
# it was stale).
for cmd in $("$T" --commands); do
	grep -qF "\`$cmd" docs/operations.md ||
		{ echo "FAIL: docs/operations.md does not list tsec $cmd"; fail=1; }
done
# Every option tsec takes is in tsec(1), and every action of the one list
# in tinysecurity-policy(5), docs/policy.md ("family.verb", or the verb in a
# family's "family.a|b|c" list) and `tsec help check` (issue 51, item 17:
# the cert.* actions were missing from all three, --min-coverage from
# tsec(1)).
for o in $("$T" --options); do
	grep -qF -- "$(printf '%s' "$o" | sed 's/-/\\-/g')" packaging/tsec.1 ||
		{ echo "FAIL: tsec(1) does not name $o"; fail=1; }
done
for a in $("$T" --actions); do
	fam=${a%%.*} verb=${a#*.}
	grep -qF "$a" packaging/tinysecurity-policy.5 ||
		{ echo "FAIL: tinysecurity-policy(5) does not name $a"; fail=1; }
	grep -qE "$a|$fam\.([a-z]+\|)*$verb([|\`]|\b)" docs/policy.md ||
		{ echo "FAIL: docs/policy.md does not name $a"; fail=1; }
	"$T" help check | grep -qE "$a|$fam\.([a-z]+\|)*$verb([|, ]|$)" ||
		{ echo "FAIL: tsec help check does not name $a"; fail=1; }
done

# replay decides a certificate request again with a certificate made from
# the logged attributes: the same policy changes nothing, and the log
# keeps the attributes (issue 20: only a hash was logged).
grep -q '"cert":{"names":\["docs.example"\]' "$W/decisions.log" ||
	{ echo "FAIL: no certificate attributes in the decision log"; fail=1; }
"$T" replay -v --policy examples/policy.json "$W/decisions.log" > "$W/out" 2>&1
grep -q ' 0 changed, 0 lines not replayed' "$W/out" ||
	{ echo "FAIL: replay under the same policy:"; cat "$W/out"; fail=1; }
"$T" replay --policy "$W/nofloor.json" "$W/decisions.log" > "$W/out" 2>&1
grep -q 'storage.list certificates/acme/example.com/example.com.key by svc:acme-issuer: was deny, now allow' "$W/out" ||
	{ echo "FAIL: replay without the floor:"; cat "$W/out"; fail=1; }

# The fuzzers' configuration seeds are configurations tsec-broker reads
# (issue 52, item 8: the seed held make run's placeholders and never
# parsed, so fuzz_config began from nothing).
for seed in tests/fuzz/corpus/config/*.json; do
	(umask 077 && sed "s|var/|$W/var/|g" "$seed" > "$W/seed.json")
	"$B/tsec-broker" --config "$W/seed.json" --check > "$W/out" 2>&1
	grep -q '^tsec-broker: config ' "$W/out" &&
		{ echo "FAIL: the fuzz seed $seed is no configuration:"; cat "$W/out"; fail=1; }
done

# Every method the broker serves is in tsec-broker(8)'s METHODS, said
# read-only when it is (issue 53, item 1: four methods were missing
# from the page, and the client's list of reads had drifted).
"$B/tsec-broker" --methods > "$W/methods" || { echo "FAIL: tsec-broker --methods"; fail=1; }
sed -n '/^\.SH METHODS/,/^\.SH SIGNALS/p' packaging/tsec-broker.8 > "$W/methods.8"
while read -r name flags; do
	grep -qx ".B $name" "$W/methods.8" ||
		{ echo "FAIL: tsec-broker(8) METHODS does not list $name"; fail=1; continue; }
	case " $flags " in *" read-only "*)
		grep -A1 -x ".B $name" "$W/methods.8" | grep -q '(read-only' ||
			{ echo "FAIL: tsec-broker(8) does not say $name is read-only"; fail=1; } ;;
	esac
done < "$W/methods"
[ "$(grep -c '^\.B ' "$W/methods.8")" = "$(wc -l < "$W/methods")" ] ||
	{ echo "FAIL: tsec-broker(8) METHODS lists $(grep -c '^\.B ' "$W/methods.8") methods," \
		"the broker serves $(wc -l < "$W/methods")"; fail=1; }

echo "test_docs: $ran command lines run, $([ $fail = 0 ] && echo "all as documented" || echo FAILED)"
exit $fail
