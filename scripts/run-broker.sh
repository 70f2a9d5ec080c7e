#!/bin/sh
# make run: starts tsec-broker in the foreground on the example policy,
# with storage under ./var.  Makes the keys it needs on first use (in
# var/keys) and a configuration (var/broker.json) from
# examples/broker.json with this user's uid and those keys.
set -eu
B=${1:-build/release}
mkdir -p var/keys var/run
chmod 700 var var/keys var/run
[ -f var/keys/server.key ] || "$B/tsec" keygen --curve var/keys/server >/dev/null
[ -f var/keys/client.key ] || "$B/tsec" keygen --curve var/keys/client >/dev/null
# The remote certificate store's key (blobs in var/blobs): 32 random bytes.
if [ ! -f var/keys/remote.key ]; then
	(umask 077 && head -c 32 /dev/urandom > var/keys/remote.key)
fi
# Z85 keys may hold '&', which sed would read as "the match": escape it.
esc() { printf '%s' "$1" | sed 's/[&|\\]/\\&/g'; }
# var/broker.json holds the broker's secret key: 0600, or it refuses it.
umask 077
sed -e "s|@UID@|$(id -u)|" \
    -e "s|@SERVER_SECRET@|$(esc "$(cat var/keys/server.key)")|" \
    -e "s|@CLIENT_PUBLIC@|$(esc "$(cat var/keys/client.pub)")|" \
    -e "s|@MODULE@|$(esc "$B/libtinysecurity_module.so")|" \
    examples/broker.json > var/broker.json
cat <<MSG
tsec-broker: starting on ipc://var/run/tsec.sock (your uid) and tcp://127.0.0.1:5701 (CURVE).
Call it from another terminal, here, for example:
  export TSEC_ENDPOINT=ipc://$PWD/var/run/tsec.sock
  $B/tsec health
  $B/tsec check --action storage.list --resource certificates/acme/example.com/example.com.key
  $B/tsec eval --action storage.load --resource certificates/acme/example.com/example.com.crt
  $B/tsec store put certificates/acme/example.com/example.com.json - <<< '{}'
  $B/tsec --help
  over tcp: add --endpoint tcp://127.0.0.1:5701 --server-key var/keys/server.pub --key var/keys/client
Stop it with Ctrl-C (it answers the calls in flight first).
MSG
exec "$B/tsec-broker" --config var/broker.json
