#!/bin/sh
# A Go program outside the tree builds against tinysecurity as installed,
# in module mode, offline (issue 50, item 9): `make install` into a
# temporary prefix (the library, its headers and tinysecurity.pc, and
# the Go binding's sources with their go.mod under share/gocode/src), a
# module proxy folder made from those sources and Debian's Go packages
# (scripts/goproxy), and a program of its own go.mod that requires
# tinysecurity.dev/tsecstorage, found through `#cgo pkg-config`.  The
# program runs and says what LockName makes of an IPv6 lock name.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/tsec-gomod-XXXXXX)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
make -C "$root" --no-print-directory -s install PREFIX="$prefix" > "$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; exit 1; }
# The proxy, by GOPATH mode (the builder needs nothing but the standard
# library).
GO111MODULE=off GOPATH=$tmp/gopath GOCACHE=$root/build/gocache GOFLAGS= GOENV=off \
	go run "$root/scripts/goproxy/main.go" -out "$tmp/proxy" \
	-src "$prefix/share/gocode/src" -src /usr/share/gocode/src tinysecurity.dev/tsecstorage@v0.1.0
mkdir -p "$tmp/app"
cat > "$tmp/app/go.mod" <<'MOD'
module example.com/app

go 1.19

require tinysecurity.dev/tsecstorage v0.1.0
MOD
cat > "$tmp/app/main.go" <<'GO'
package main

import (
	"fmt"

	"github.com/caddyserver/certmagic"
	"tinysecurity.dev/tsecstorage"
)

var _ certmagic.Storage = (*tsecstorage.Storage)(nil)

func main() {
	fmt.Println(tsecstorage.LockName("issue_cert_2001:db8::1"))
}
GO
cd "$tmp/app"
env GO111MODULE=on GOFLAGS=-mod=mod GOPROXY="file://$tmp/proxy" GOSUMDB=off GONOSUMDB='*' \
	GOPATH="$tmp/gopath" GOMODCACHE="$tmp/modcache" GOCACHE="$root/build/gocache" GOENV=off \
	PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CGO_LDFLAGS="-Wl,-rpath,$prefix/lib" \
	go build -o app . > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
out=$(./app)
if [ "$out" != "issue_cert_2001%3Adb8%3A%3A1" ]; then
	echo "go-module-check: the program said '$out'" >&2
	exit 1
fi
# It linked the installed library, not the tree's.
ldd ./app | grep -q "$prefix/lib/libtinysecurity.so" ||
	{ echo "go-module-check: not linked to $prefix/lib:" >&2; ldd ./app >&2; exit 1; }
echo "go-module-check: a module-mode program outside the tree built offline against $prefix"
