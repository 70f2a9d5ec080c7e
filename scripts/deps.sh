#!/bin/sh
# Makes sure the Debian packages the build needs are installed.
# As root: installs what is missing with apt-get.  Otherwise: prints the
# exact apt-get line and fails.
set -eu
#
#   sh scripts/deps.sh            what the build and `make test` need
#   sh scripts/deps.sh clang      and clang with its fuzzing runtime (make fuzz)
#   sh scripts/deps.sh valgrind   and valgrind (make memcheck)
#   sh scripts/deps.sh servers    and etcd, redis-server, pebble and lego, and
#                                 s3rver (npm; an S3-compatible server): the
#                                 tests start their own on loopback
#                                 (make test); libfaketime, to run a broker
#                                 whose wall clock is wrong
#   sh scripts/deps.sh go         and Go with certmagic (Debian's, 0.17.2):
#                                 the Go binding and its tests; and caddy
#                                 (2.6.2): its on-demand TLS asks the broker
#   sh scripts/deps.sh shells     and zsh and fish: test_cli runs their
#                                 completions as it runs bash's (make test)
PKGS="gcc make binutils pkg-config libjansson-dev libcmocka-dev libssl-dev libsodium-dev libzmq3-dev libcurl4-openssl-dev libarchive-dev libhiredis-dev libmicrohttpd-dev libpsl-dev publicsuffix"
for extra in "$@"; do
	case $extra in
	clang) PKGS="$PKGS clang libclang-rt-14-dev" ;;
	valgrind) PKGS="$PKGS valgrind" ;;
	servers) PKGS="$PKGS etcd-server redis-server openssl pebble lego libfaketime" ;;
	go) PKGS="$PKGS golang-go golang-github-caddyserver-certmagic-dev caddy" ;;
	shells) PKGS="$PKGS zsh fish" ;;
	*) echo "deps: unknown group '$extra' (clang, valgrind, servers, go, shells)" >&2; exit 2 ;;
	esac
done
# s3rver, from npm (node and npm as the machine has them; from Debian
# only where there are none).
S3RVER_VERSION=3.7.1
want_s3rver=""
case " $* " in *" servers "*) want_s3rver=1 ;; esac
s3rver_there() {
	[ -e /usr/lib/node_modules/s3rver/bin/s3rver.js ] ||
		[ -e /usr/local/lib/node_modules/s3rver/bin/s3rver.js ]
}
if [ -n "$want_s3rver" ] && ! command -v npm > /dev/null; then
	PKGS="$PKGS nodejs npm"
fi
install_s3rver() {
	[ -z "$want_s3rver" ] && return 0
	s3rver_there && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "deps: s3rver missing; run: sudo npm install -g s3rver@$S3RVER_VERSION" >&2
		return 1
	fi
	echo "deps: installing s3rver@$S3RVER_VERSION (npm)"
	npm install -g --no-audit --no-fund --loglevel=error "s3rver@$S3RVER_VERSION" > /dev/null
}
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	install_s3rver
	exit $?
fi
if [ "$(id -u)" = 0 ]; then
	echo "deps: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# Servers are for the tests, which start their own: keep the
	# packages from starting system-wide ones.
	blocked=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		blocked=1
	fi
	rc=0
	apt-get install -y -qq --no-install-recommends $missing || rc=$?
	if [ -n "$blocked" ]; then rm -f /usr/sbin/policy-rc.d; fi
	[ "$rc" = 0 ] && { install_s3rver || rc=$?; }
	exit $rc
else
	echo "deps: missing packages:$missing" >&2
	echo "deps: run: sudo apt-get install -y$missing" >&2
	exit 1
fi
