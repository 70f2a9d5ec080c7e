#!/bin/sh
# ACME end to end, on loopback, nothing left behind:
#   sh examples/acme/run.sh [BUILD_DIR]       (default build/release)
#
# pebble (an ACME test CA; PEBBLE_VA_ALWAYS_VALID=1, its TLS certificate
# made here with openssl) issues a certificate to lego (an ACME client,
# trusting pebble through LEGO_CA_CERTIFICATES); lego's hook saves the
# certificate, key and metadata through tsec-broker as svc:acme-issuer,
# under a policy that wants the SAN to cover the domain and an RSA key of
# 2048 bits; svc:web loads them back and they match what lego wrote; the
# issuer saving the same files under a domain it may not write is
# refused, and the refusal is in the decision log.  Then the remote
# certificate store: lego's hook publishes a second certificate as blobs
# (a folder here; an S3 bucket the same way) with three references, and
# the web server fetches it, every blob verified.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build/release}" && pwd)
for p in pebble lego openssl; do
	command -v $p >/dev/null || { echo "acme: $p is not installed (sh scripts/deps.sh servers)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/tsec-acme-XXXXXX)
pebble_pid= broker_pid=
cleanup() {
	set +e
	if [ -n "$pebble_pid" ]; then kill "$pebble_pid" 2>/dev/null; fi
	if [ -n "$broker_pid" ]; then kill "$broker_pid" 2>/dev/null; fi
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
say() { echo "acme: $*"; }
# Below the kernel's ephemeral range (32768 and up by default), where an
# outgoing connection's local port can make a listener's bind fail.
port() { shuf -i 20000-32000 -n 1; }

# pebble, over https with a certificate for 127.0.0.1.
cd "$work"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
	-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
	-keyout pebble-key.pem -out pebble-cert.pem 2>/dev/null
# A port chosen at random may be taken: start again on others if so.
for try in 1 2 3; do
	acme_port=$(port)
	cat > pebble.json <<JSON
{"pebble": {"listenAddress": "127.0.0.1:$acme_port", "managementListenAddress": "127.0.0.1:$(port)",
 "certificate": "pebble-cert.pem", "privateKey": "pebble-key.pem",
 "httpPort": $(port), "tlsPort": $(port), "ocspResponderURL": "",
 "externalAccountBindingRequired": false}}
JSON
	PEBBLE_VA_ALWAYS_VALID=1 PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 \
		pebble -config pebble.json > pebble.log 2>&1 &
	pebble_pid=$!
	# Up when its port completes a TLS handshake (pebble says "Listening"
	# before it binds), gone if it exited (a port someone else had).
	i=0 up=
	while kill -0 "$pebble_pid" 2>/dev/null && [ $i -lt 100 ]; do
		if openssl s_client -connect "127.0.0.1:$acme_port" </dev/null >/dev/null 2>&1; then
			up=1; break
		fi
		i=$((i + 1)); sleep 0.1
	done
	[ -n "$up" ] && break
	kill "$pebble_pid" 2>/dev/null || true; wait "$pebble_pid" 2>/dev/null || true; pebble_pid=
	[ $try -lt 3 ] || { echo "acme: pebble did not start:" >&2; tail -5 pebble.log >&2; exit 1; }
done

# tsec-broker over tcp with CURVE: the issuer and the web server are two
# keys, so two principals.
"$build/tsec" keygen --curve server >/dev/null
"$build/tsec" keygen --curve issuer >/dev/null
"$build/tsec" keygen --curve web >/dev/null
(umask 077 && head -c 32 /dev/urandom > remote.key)
export TSEC="$build/tsec" TSEC_SERVER_KEY="$work/server.pub"
export ACME_ISSUER=acme-pebble
# As for pebble: a port someone else holds means another try.
for try in 1 2 3; do
	broker_ep="tcp://127.0.0.1:$(port)"
	# It holds the broker's secret key: 0600, or the broker refuses it.
	(umask 077 && cat > broker.json) <<JSON
{"module": "$build/libtinysecurity_module.so", "policy": "$here/policy.json",
 "allow_unsigned_policy": true, "storage": "$work/store", "decision_log": "$work/decisions.log",
 "remote": {"blobs": "file:$work/blobs", "key_file": "$work/remote.key"},
 "endpoints": ["$broker_ep"], "server_secret_key": "$(cat server.key)",
 "clients": [{"public_key": "$(cat issuer.pub)", "principal": "svc:acme-issuer"},
             {"public_key": "$(cat web.pub)", "principal": "svc:web"}]}
JSON
	"$build/tsec-broker" --config broker.json 2> broker.err &
	broker_pid=$!
	export TSEC_ENDPOINT="$broker_ep"
	i=0 up=
	while kill -0 "$broker_pid" 2>/dev/null && [ $i -lt 40 ]; do
		if TSEC_KEY="$work/issuer" "$TSEC" health --timeout-ms 500 >/dev/null 2>&1; then
			up=1; break
		fi
		i=$((i + 1))
	done
	[ -n "$up" ] && break
	kill "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; broker_pid=
	[ $try -lt 3 ] || { echo "acme: tsec-broker did not start:" >&2; cat broker.err >&2; exit 1; }
done

say "lego obtains a certificate for test.example from pebble; its hook saves it as the issuer"
TSEC_KEY="$work/issuer" LEGO_CA_CERTIFICATES="$work/pebble-cert.pem" \
	lego --server "https://127.0.0.1:$acme_port/dir" --accept-tos --email ops@test.example \
	--domains test.example --key-type rsa2048 --http --http.port "127.0.0.1:$(port)" \
	--path "$work/lego" run --run-hook "sh $here/hook.sh" > lego.log 2>&1 ||
	{ cat lego.log >&2; echo "acme: pebble's log ends:" >&2; tail -5 pebble.log >&2; exit 1; }
say "saved: $(ls store/certificates/$ACME_ISSUER/test.example/ | tr '\n' ' ')"

say "the web server loads it back: the same bytes lego wrote"
mkdir got
TSEC_KEY="$work/web" "$TSEC" cert load "$ACME_ISSUER" test.example got
cmp got/test.example.crt lego/certificates/test.example.crt
cmp got/test.example.key lego/certificates/test.example.key
cmp got/test.example.json lego/certificates/test.example.json

say "the issuer saving it under a domain it may not write is refused"
if TSEC_KEY="$work/issuer" "$TSEC" cert save "$ACME_ISSUER" other.example \
	lego/certificates/test.example.crt lego/certificates/test.example.key \
	lego/certificates/test.example.json 2> refused.err; then
	echo "acme: FAILED: the save under other.example was allowed" >&2; exit 1
fi
grep -q 'forbidden\|nothing allowed' refused.err
[ ! -e store/certificates/$ACME_ISSUER/other.example ]
kill -HUP "$broker_pid"         # the decision log is flushed in the background
i=0
until grep '"resource":"certificates/acme-pebble/other.example/other.example.crt"' decisions.log 2>/dev/null |
	grep -q '"decision":"deny"'; do
	i=$((i + 1)); [ $i -lt 50 ] || { echo "acme: FAILED: the refusal is not in the log" >&2; tail -3 decisions.log >&2; exit 1; }
	sleep 0.1
done
say "refused and logged: $(grep -c '"decision":"deny"' decisions.log) denial(s) in the decision log"

say "a 1024-bit certificate for test.example is refused too (min_rsa_bits)"
openssl req -x509 -newkey rsa:1024 -nodes -days 30 -subj /CN=test.example \
	-addext "subjectAltName=DNS:test.example" -keyout weak.key -out weak.crt 2>/dev/null
if TSEC_KEY="$work/issuer" "$TSEC" cert save "$ACME_ISSUER" test.example weak.crt weak.key \
	lego/certificates/test.example.json 2>/dev/null; then
	echo "acme: FAILED: a 1024-bit certificate was saved" >&2; exit 1
fi
cmp store/certificates/$ACME_ISSUER/test.example/test.example.crt lego/certificates/test.example.crt

say "lego obtains www.test.example; its hook publishes it to the remote certificate store"
export ACME_ISSUER=acme-remote
TSEC_KEY="$work/issuer" TSEC_CERT_VERB=publish LEGO_CA_CERTIFICATES="$work/pebble-cert.pem" \
	lego --server "https://127.0.0.1:$acme_port/dir" --accept-tos --email ops@test.example \
	--domains www.test.example --key-type rsa2048 --http --http.port "127.0.0.1:$(port)" \
	--path "$work/lego" run --run-hook "sh $here/hook.sh" > lego2.log 2>&1 ||
	{ cat lego2.log >&2; exit 1; }
say "published: $(find blobs -type f | wc -l) blobs, references at $(ls store/certificates/$ACME_ISSUER/www.test.example/ | tr '\n' ' ')"
if grep -l "PRIVATE KEY" blobs/key/* >/dev/null 2>&1; then
	echo "acme: FAILED: a private key is stored unsealed" >&2; exit 1
fi

say "the web server fetches it: every blob verified, the bytes lego wrote"
TSEC_KEY="$work/web" "$TSEC" cert exists "$ACME_ISSUER" www.test.example >/dev/null
mkdir got-remote
TSEC_KEY="$work/web" "$TSEC" cert fetch "$ACME_ISSUER" www.test.example got-remote
for f in crt key json; do
	cmp got-remote/www.test.example.$f lego/certificates/www.test.example.$f
done
say "publishing the same again changes nothing: $(TSEC_KEY="$work/issuer" "$TSEC" cert publish \
	"$ACME_ISSUER" www.test.example lego/certificates/www.test.example.crt \
	lego/certificates/www.test.example.key lego/certificates/www.test.example.json)"

say "the issuer may not write a reference by hand (the floor; the store would refuse it too)"
if TSEC_KEY="$work/issuer" "$TSEC" store put certificates/$ACME_ISSUER/www.test.example/www.test.example.key \
	store/certificates/$ACME_ISSUER/www.test.example/www.test.example.crt 2> raw.err; then
	echo "acme: FAILED: the issuer wrote a reference with store put" >&2; exit 1
fi
grep -q 'forbidden by floor' raw.err
say "ok"
