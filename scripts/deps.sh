#!/bin/sh
# Makes sure the Debian packages the build needs are installed.
# As root: installs what is missing with apt-get.  Otherwise: prints the
# exact apt-get line and fails.
set -eu
#
#   sh scripts/deps.sh            what the build and `make test` need
#   sh scripts/deps.sh clang      and clang with its fuzzing runtime (make fuzz)
#   sh scripts/deps.sh valgrind   and valgrind (make memcheck)
#   sh scripts/deps.sh servers    and etcd and redis-server (the tests start
#                                 their own on loopback; make test)
PKGS="gcc make binutils pkg-config libjansson-dev libcmocka-dev libssl-dev libsodium-dev libzmq3-dev libcurl4-openssl-dev libarchive-dev libhiredis-dev libmicrohttpd-dev"
for extra in "$@"; do
	case $extra in
	clang) PKGS="$PKGS clang libclang-rt-14-dev" ;;
	valgrind) PKGS="$PKGS valgrind" ;;
	servers) PKGS="$PKGS etcd-server redis-server openssl pebble lego" ;;
	*) echo "deps: unknown group '$extra' (clang, valgrind, servers)" >&2; exit 2 ;;
	esac
done
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
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
	exit $rc
else
	echo "deps: missing packages:$missing" >&2
	echo "deps: run: sudo apt-get install -y$missing" >&2
	exit 1
fi
