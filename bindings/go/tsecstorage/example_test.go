package tsecstorage_test

import (
	"github.com/caddyserver/certmagic"
	"tinysecurity.dev/tsecstorage"
)

// The README's four lines, compiled with the tests (not run: no broker).
func ExampleNew() {
	brokerPub := "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"         // the broker's public key, Z85
	pub, sec, _ := tsecstorage.LoadKeyPair("/etc/tinysecurity/web") // tsec keygen --curve
	s, _ := tsecstorage.New(tsecstorage.Options{Endpoint: "tcp://10.0.0.5:7300",
		ServerPublicKey: brokerPub, PublicKey: pub, SecretKey: sec})
	certmagic.Default.Storage = s
}
