#!/bin/sh
# lego's --run-hook: save what lego obtained through tsec-broker, as the
# issuer, as one group (certificate, key, metadata); with
# TSEC_CERT_VERB=publish, publish it to the broker's remote certificate
# store instead (immutable blobs, three references).  lego sets
# LEGO_CERT_DOMAIN, LEGO_CERT_PATH and LEGO_CERT_KEY_PATH; run.sh sets the
# TSEC_* connection and ACME_ISSUER.
set -eu
meta="${LEGO_CERT_PATH%.crt}.json"
exec "$TSEC" cert "${TSEC_CERT_VERB:-save}" "$ACME_ISSUER" "$LEGO_CERT_DOMAIN" \
	"$LEGO_CERT_PATH" "$LEGO_CERT_KEY_PATH" "$meta"
