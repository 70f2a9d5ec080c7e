# tinysecurity build.
#
#   make                 both modes: build/debug and build/release
#   make MODE=release    one mode
#   make test            deps, then every test in debug and under ASan+UBSan
#   make run             release build, tsec-broker on the example policy
#   make verify          release build, verify_module on the example policy
#   make bench           release microbenchmarks
#   V=1                  show full command lines
#
# Settings may go in config.mak (not tracked).

-include config.mak

VERSION ?= 0.1.0
CC ?= cc
MODE ?= debug
SANITIZE ?=
PREFIX ?= /usr/local

ifeq ($(filter $(MODE),debug release),)
$(error MODE must be debug or release)
endif

# ASan+UBSan builds go to build/<mode>-san, ThreadSanitizer to -tsan.
BUILD_NAME := $(MODE)$(if $(SANITIZE),$(if $(filter thread,$(SANITIZE)),-tsan,-san))
BUILD_ROOT ?= build
B := $(BUILD_ROOT)/$(BUILD_NAME)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wvla -Wformat=2 -Werror
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -pthread -fPIC $(WARN) -I. -Iinclude \
	-DTSEC_VERSION='"$(VERSION)"' -MMD -MP
ifeq ($(MODE),release)
MODE_CFLAGS := -O2 -DNDEBUG -g
else
MODE_CFLAGS := -O0 -g3
endif
ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
CFLAGS ?=
LDFLAGS ?=
ALL_CFLAGS = $(BASE_CFLAGS) $(MODE_CFLAGS) $(SAN_FLAGS) $(CFLAGS)
ALL_LDFLAGS = -pthread $(SAN_FLAGS) $(LDFLAGS)

# A change of compiler or flags (CC=clang, CFLAGS=..., LDFLAGS=...)
# rebuilds every object: each depends on $(B)/.flags, whose text is the
# compiler and its flags, rewritten only when they differ from what built
# the tree (tests/test_build_flags.sh).
FLAGS_STAMP := $(B)/.flags
FLAGS_TEXT := $(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS)
ifneq ($(FLAGS_TEXT),$(file <$(FLAGS_STAMP)))
$(shell mkdir -p $(B))
$(file >$(FLAGS_STAMP),$(FLAGS_TEXT))
endif

JANSSON_LIBS := -ljansson
ZMQ_LIBS := -lzmq
ARCHIVE_LIBS := -lcurl -larchive
CRYPTO_LIBS := -lcrypto
SSL_LIBS := -lssl
SODIUM_LIBS := -lsodium
# What a program linking the broker library needs.
BROKER_LIBS = $(JANSSON_LIBS) $(ZMQ_LIBS) $(SODIUM_LIBS) $(SSL_LIBS) $(CRYPTO_LIBS) -lcurl -lhiredis \
	-ldl
CMOCKA_LIBS := -lcmocka
# tsec-broker's HTTP listeners (metrics, ask) and the public suffix list
# (cert.obtain's rate counts per registrable domain).
MHD_LIBS := -lmicrohttpd -lpsl

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-6s %s\n' $(1) $(2)
endif

# The parts, one folder each (docs/architecture.md).
CORE_SRC := common/error.c common/key.c common/suggest.c common/clock.c common/where.c
SHARED_SRC := $(CORE_SRC) common/file.c common/wire.c common/jsonw.c common/sign.c common/prom.c common/secret.c common/opts.c \
	common/certinfo.c common/wire_fast.c common/trust.c
MODULE_SRC := module/match.c module/compile.c module/reader.c module/rule.c \
	module/tables.c module/eval.c module/explain.c \
	module/cert.c module/entry.c
BUS_SRC := broker/bus/bus.c broker/bus/loader.c
STORAGE_SRC := $(addprefix broker/storage/,keys.c registry.c store.c watch.c records.c raw.c txn.c lock.c \
	certfiles.c \
	gates.c lease.c localcache.c envelope.c \
	file/file.c file/file_tree.c file/file_folders.c file/file_journal.c file/file_commit.c \
	file/file_recover.c file/file_lock.c \
	memory/memory.c \
	etcd/etcd_http.c etcd/etcd_json.c etcd/etcd.c etcd/etcd_lock.c etcd/etcd_keeper.c etcd/etcd_queue.c \
	etcd/etcd_feed.c etcd/etcd_list.c \
	redis/redis.c redis/redis_kv.c redis/redis_lock.c redis/redis_tls.c redis/redis_reply.c) \
	broker/certcache/certcache.c broker/certcache/certcache_pem.c \
	broker/certcache/certcache_follow.c broker/certcache/certcache_fails.c
REMOTE_SRC := $(addprefix broker/remote/,remote.c remote_hw.c remote_blob.c remote_ref.c remote_cert.c \
	remote_sweep.c blobs_file.c blobs_memory.c blobs_s3.c blobs_s3_answers.c)
CLIENT_SRC := broker/client/client.c broker/client/client_async.c
PTEST_SRC := broker/policytest/policytest.c broker/policytest/diff.c broker/policytest/diff_nfa.c broker/policytest/diff_cert.c \
	broker/policytest/nearmiss.c
HTTP_SRC := common/http.c
BROKER_SRC := $(BUS_SRC) $(HTTP_SRC) $(STORAGE_SRC) $(REMOTE_SRC) $(CLIENT_SRC) $(PTEST_SRC)
DAEMON_SRC := $(addprefix broker/daemon/,main.c say.c config.c config_callers.c config_paths.c policy.c auth.c callers.c worker.c \
	methods.c decision.c storage.c remote_admin.c held.c dispatch.c queue.c serve.c ipc.c frames.c declog.c fleet.c probe.c metrics.c \
	obtain.c ask.c httpkeep.c check.c)
CLI_SRC := broker/cli/tsec.c broker/cli/exits.c broker/cli/tools.c broker/cli/schema.c broker/cli/replay.c broker/cli/replay_line.c broker/cli/online.c broker/cli/offline.c broker/cli/decide.c broker/cli/warn.c broker/cli/can.c broker/cli/obtain.c broker/cli/cert.c
VERIFY_SRC := verifier/verify.c verifier/archive.c

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
mobj = $(patsubst %.c,$(B)/mobj/%.o,$(1))

MODULE_OBJ := $(call mobj,$(MODULE_SRC) $(CORE_SRC))
# The module (the decision path) is built with -O3 in release: fewer
# instructions per Check and Evaluate than -O2 (perf/instructions.sh).
ifeq ($(MODE),release)
$(MODULE_OBJ): MODULE_OPT := -O3
endif
BROKER_OBJ := $(call mobj,$(BROKER_SRC) $(SHARED_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
CLI_OBJ := $(call obj,$(CLI_SRC))
VERIFY_OBJ := $(call obj,$(VERIFY_SRC))

MODULE_SO := $(B)/libtinysecurity_module.so
BROKER_A := $(B)/libtinysecurity.a
SONAME := libtinysecurity.so.0
BROKER_SO_REAL := $(B)/libtinysecurity.so.$(VERSION)
BROKER_SO := $(B)/libtinysecurity.so
VERIFY := $(B)/verify_module
DAEMON := $(B)/tsec-broker
CLI := $(B)/tsec

# Every suite there is (tests/test_NAME.c, or .sh for the scripts): a new
# one runs in `make test` by being there (issue 53, item 7).
TESTS := $(sort $(patsubst tests/test_%.c,%,$(wildcard tests/test_*.c)) \
	$(patsubst tests/test_%.sh,%,$(wildcard tests/test_*.sh)))
TEST_BINS := $(addprefix $(B)/tests/test_,$(TESTS))
FIXTURES := mod_wrong_abi mod_no_entry mod_short_desc mod_null_fn mod_refuse \
	mod_serial mod_proxy mod_future mod_abi10 mod_bad_decision
FIXTURE_SOS := $(addprefix $(B)/fixtures/,$(addsuffix .so,$(FIXTURES))) \
	$(B)/fixtures/not_elf.so
BENCHES := bench_bus bench_policy_scale bench_certcache bench_store bench_zmq \
	bench_backend bench_instructions bench_turn bench_fleet bench_calls bench_remote
BENCH_BINS := $(addprefix $(B)/,$(BENCHES))

.PHONY: all build both test check run verify bench deps clean dist install fuzz \
	tsan memcheck instructions chaos chaos-mutants bench-smoke
.DEFAULT_GOAL := both
.SECONDARY:

both:
	$(Q)$(MAKE) --no-print-directory MODE=debug build
	$(Q)$(MAKE) --no-print-directory MODE=release build

build: $(MODULE_SO) $(BROKER_A) $(BROKER_SO) $(VERIFY) $(DAEMON) $(CLI) \
	$(BENCH_BINS) $(B)/compare_modules

deps:
	$(Q)sh scripts/deps.sh

# README command 1.
test: deps
	$(Q)sh scripts/deps.sh servers go shells
	$(Q)$(MAKE) --no-print-directory MODE=debug check
	$(Q)$(MAKE) --no-print-directory MODE=debug SANITIZE=address,undefined check
	$(Q)$(MAKE) --no-print-directory MODE=release check
	$(Q)$(MAKE) --no-print-directory MODE=release go-test

# ---- the Go binding (bindings/go/tsecstorage: certmagic.Storage) ----
#
# Go 1.19 and certmagic 0.17.2 from Debian, offline, in GOPATH mode: the
# package is seen as tinysecurity.dev/tsecstorage through a link under
# build/gopath, and links this build's libtinysecurity.so.
# The package finds the library with `#cgo pkg-config: tinysecurity`: in
# the tree, a tinysecurity.pc naming this build ($(B)/pkgconfig).
GO_ENV = GOPATH=$(CURDIR)/build/gopath:/usr/share/gocode GO111MODULE=off GOENV=off \
	GOCACHE=$(CURDIR)/build/gocache GOFLAGS= \
	PKG_CONFIG_PATH=$(CURDIR)/$(B)/pkgconfig \
	CGO_LDFLAGS="-Wl,-rpath,$(CURDIR)/$(B)" \
	TSEC_BUILD_DIR=$(CURDIR)/$(B)
# Each package by name: go does not follow the link for ".../..."
GO_PKGS := tinysecurity.dev/tsecstorage tinysecurity.dev/tsecstorage/cmd/tsec-certmagic
GO_TIMEOUT ?= 20m

.PHONY: go-link go-test go-module-check bench-certmagic
go-link:
	$(Q)mkdir -p $(B)/pkgconfig
	$(Q)sed -e 's|^prefix=.*|prefix=$(CURDIR)|' -e 's|^libdir=.*|libdir=$(CURDIR)/$(B)|' \
		-e 's|@VERSION@|$(VERSION)|' packaging/tinysecurity.pc.in > $(B)/pkgconfig/tinysecurity.pc
	$(Q)mkdir -p build/gopath/src/tinysecurity.dev
	$(Q)ln -sfn $(CURDIR)/bindings/go/tsecstorage build/gopath/src/tinysecurity.dev/tsecstorage
	$(Q)ln -sfn $(CURDIR)/perf/go/certmagic_bench build/gopath/src/tinysecurity.dev/certmagic_bench
	@# Go's build cache does not see the C headers a cgo package includes
	@# from elsewhere: a header changed since the cache was made empties it
	@# (a cached object built against the old struct tsec_client_opts
	@# passed a pointer where the new one has its size).
	$(Q)if [ ! -f build/gocache/.headers ] || \
		[ -n "$$(find include -name '*.h' -newer build/gocache/.headers)" ]; then \
		rm -rf build/gocache; mkdir -p build/gocache; touch build/gocache/.headers; fi

go-test: build go-link
	$(Q)test -z "$$(gofmt -l bindings/go)" || { gofmt -l bindings/go; echo "go: not gofmt'ed" >&2; exit 1; }
	$(GO_ENV) go vet $(GO_PKGS) tinysecurity.dev/certmagic_bench
	$(GO_ENV) go test -race -count=1 -timeout $(GO_TIMEOUT) $(GO_PKGS)
	$(Q)sh scripts/go-module-check.sh

# A Go program outside the tree, in module mode and offline, built against
# tinysecurity installed (make install into a temporary prefix).
go-module-check:
	$(Q)sh scripts/go-module-check.sh

# certmagic's FileStorage against ours through the broker, A-B-B-A.
CERTMAGIC_ROUNDS ?= 4000
CERTMAGIC_GATE ?= 10
CERTMAGIC_RAW ?= perf/results/certmagic-$(shell date +%Y-%m-%d).csv
bench-certmagic: deps
	$(Q)sh scripts/deps.sh go
	$(Q)$(MAKE) --no-print-directory MODE=release certmagic-run

.PHONY: certmagic-run
certmagic-run: build go-link
	$(GO_ENV) sh perf/certmagic.sh $(B) $(CERTMAGIC_ROUNDS) "$(CERTMAGIC_RAW)" $(CERTMAGIC_GATE)

check: build $(TEST_BINS) $(FIXTURE_SOS)
	$(Q)sh tests/run.sh $(B) $(TEST_BINS)

# README command 2: the broker in the foreground on the example policy.
run: deps
	$(Q)$(MAKE) --no-print-directory MODE=release build
	sh scripts/run-broker.sh build/release

# The latency job through the bus, on the example policy.
verify: deps
	$(Q)$(MAKE) --no-print-directory MODE=release build
	build/release/verify_module --policy examples/policy.json \
		build/release/libtinysecurity_module.so

bench: deps
	$(Q)sh scripts/deps.sh servers
	$(Q)$(MAKE) --no-print-directory MODE=release build
	build/release/bench_bus
	build/release/bench_policy_scale
	build/release/bench_store
	build/release/bench_backend
	build/release/bench_certcache
	build/release/bench_turn
	build/release/bench_zmq
	build/release/bench_fleet
	build/release/bench_remote

# Every benchmark with tiny counts (CI): a crash or a missing case fails.
bench-smoke: deps
	$(Q)sh scripts/deps.sh servers
	$(Q)$(MAKE) --no-print-directory MODE=release build
	sh scripts/bench-smoke.sh build/release
	$(Q)sh scripts/deps.sh go
	$(Q)$(MAKE) --no-print-directory MODE=release certmagic-run CERTMAGIC_ROUNDS=5 CERTMAGIC_RAW= CERTMAGIC_GATE=0

# The fault-injecting chaos run, longer: CHAOS_SECONDS per case (etcd
# and redis, with and without a LocalCache, and through brokers: 6 runs;
# the default, 100 s each, is 10 minutes).
CHAOS_SECONDS ?= 100
chaos: deps
	$(Q)sh scripts/deps.sh servers
	$(Q)$(MAKE) --no-print-directory MODE=debug build build/debug/tests/test_chaos
	CHAOS_SECONDS=$(CHAOS_SECONDS) build/debug/tests/test_chaos

# The chaos checker tested by mutation of the storage code it watches:
# each fault class planted in a scratch copy must be named
# (scripts/chaos-mutants.sh; CHAOS_MUTANT_SECONDS per mutant, default 8).
CHAOS_MUTANT_SECONDS ?= 8
chaos-mutants: deps
	$(Q)sh scripts/deps.sh servers
	$(Q)$(MAKE) --no-print-directory MODE=debug build build/debug/tests/test_chaos
	sh scripts/chaos-mutants.sh $(CHAOS_MUTANT_SECONDS)

# Instructions per Check of two and per Evaluate (callgrind; exact).
instructions: deps
	$(Q)sh scripts/deps.sh valgrind
	$(Q)$(MAKE) --no-print-directory MODE=release build
	sh perf/instructions.sh build/release
	sh perf/broker_instructions.sh build/release
	sh perf/turn_instructions.sh build/release
	sh perf/compile_instructions.sh build/release
	sh perf/remote_instructions.sh build/release

clean:
	rm -rf build

# ---- more sanitizers ----
#
#   make tsan       ThreadSanitizer over the concurrent suites: reload under
#                   load, the certificate cache, locks, the conformance
#                   suite (gates, cache, leases), the crash suite and the
#                   fleet suite (etcd's lease keeper and reaper).  The
#                   daemon's suite is left out: libzmq is not built with
#                   ThreadSanitizer, so its own synchronisation shows as
#                   races inside it.
#   make memcheck   valgrind's memcheck over the in-process suites.

TSAN_TESTS := reload certcache lock conformance conformance_locks crash remote remote_attacks \
	fleet
# test_certcache and test_reload are left out: their threads spin while
# another works (readers while a writer frees, a reloader while callers
# call), which under valgrind's one-thread-at-a-time scheduling takes many
# minutes; ASan and ThreadSanitizer cover both.
MEMCHECK_TESTS := key match compile cert decision loader exports wire \
	conformance conformance_locks store store_disk store_waits localcache lock verifier

tsan: deps
	$(Q)$(MAKE) --no-print-directory MODE=debug SANITIZE=thread build \
		$(addprefix build/debug-tsan/tests/test_,$(TSAN_TESTS)) \
		$(patsubst build/debug/%,build/debug-tsan/%,$(FIXTURE_SOS))
	$(Q)TSAN_OPTIONS="halt_on_error=1 detect_deadlocks=0" sh tests/run.sh build/debug-tsan \
		$(addprefix build/debug-tsan/tests/test_,$(TSAN_TESTS))

memcheck: deps
	$(Q)sh scripts/deps.sh valgrind
	$(Q)$(MAKE) --no-print-directory MODE=debug build \
		$(addprefix build/debug/tests/test_,$(MEMCHECK_TESTS)) $(FIXTURE_SOS)
	$(Q)VALGRIND="valgrind -q --error-exitcode=99 --leak-check=full \
		--errors-for-leak-kinds=definite --show-leak-kinds=definite" \
		sh tests/run.sh build/debug-memcheck \
		$(addprefix build/debug/tests/test_,$(MEMCHECK_TESTS))

# ---- fuzzing (clang's libFuzzer) ----
#
#   make fuzz FUZZ_SECONDS=N    builds every harness with clang, ASan and
#                               UBSan, and runs each for N seconds from its
#                               seeds in tests/fuzz/corpus/NAME (new inputs
#                               go to build/fuzz/corpus/NAME)

FUZZ_SECONDS ?= 10
FUZZERS := policy key request cert wire wire_diff config storage archive remote refs obtain where redis \
	certcache glob s3 etcd etcd_kv signed replay client params
FZ := build/fuzz
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -pthread -I. -Iinclude -DTSEC_VERSION='"$(VERSION)"' \
	-DTSEC_FUZZ_MODULE='"$(FZ)/libtinysecurity_module.so"' -g -O1 \
	-fno-omit-frame-pointer $(WARN)
FUZZ_SAN := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_LIBS := $(BROKER_LIBS) $(ARCHIVE_LIBS) $(MHD_LIBS) -lm
FUZZ_MODULE_SRC := $(filter-out module/entry.c,$(MODULE_SRC)) $(CORE_SRC)
FUZZ_DAEMON_SRC := $(filter-out broker/daemon/main.c,$(DAEMON_SRC))

.PHONY: fuzz-deps
fuzz-deps:
	$(Q)sh scripts/deps.sh clang

$(FZ)/libtinysecurity_module.so: $(MODULE_SRC) $(CORE_SRC) module/module.map | fuzz-deps
	@mkdir -p $(dir $@)
	$(call msg,FUZZ,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fPIC -shared -fvisibility=hidden \
		-fsanitize=fuzzer-no-link,address,undefined -o $@ $(MODULE_SRC) $(CORE_SRC) \
		-Wl,--version-script=module/module.map $(JANSSON_LIBS) $(CRYPTO_LIBS)

$(FZ)/fuzz_policy $(FZ)/fuzz_glob: $(FZ)/%: tests/fuzz/%.c $(FUZZ_MODULE_SRC)
$(FZ)/fuzz_key: tests/fuzz/fuzz_key.c $(CORE_SRC)
$(FZ)/fuzz_where: tests/fuzz/fuzz_where.c common/where.c
$(FZ)/fuzz_params: tests/fuzz/fuzz_params.c common/opts.c $(CORE_SRC)
$(FZ)/fuzz_wire_diff: tests/fuzz/fuzz_wire_diff.c $(SHARED_SRC)
$(FZ)/fuzz_request $(FZ)/fuzz_cert $(FZ)/fuzz_storage $(FZ)/fuzz_remote $(FZ)/fuzz_refs \
		$(FZ)/fuzz_redis $(FZ)/fuzz_certcache $(FZ)/fuzz_s3 \
		$(FZ)/fuzz_etcd $(FZ)/fuzz_client: $(FZ)/%: tests/fuzz/%.c \
	$(BROKER_SRC) $(SHARED_SRC) $(FZ)/libtinysecurity_module.so
$(FZ)/fuzz_wire $(FZ)/fuzz_config $(FZ)/fuzz_obtain $(FZ)/fuzz_signed: $(FZ)/%: tests/fuzz/%.c $(FUZZ_DAEMON_SRC) \
	$(BROKER_SRC) $(SHARED_SRC) $(FZ)/libtinysecurity_module.so
$(FZ)/fuzz_archive: tests/fuzz/fuzz_archive.c $(VERIFY_SRC) $(BROKER_SRC) $(SHARED_SRC)
$(FZ)/fuzz_etcd_kv: tests/fuzz/fuzz_etcd_kv.c tests/httpfake.c $(BROKER_SRC) $(SHARED_SRC) \
	$(FZ)/libtinysecurity_module.so
$(FZ)/fuzz_replay: tests/fuzz/fuzz_replay.c broker/cli/replay_line.c $(BROKER_SRC) $(SHARED_SRC) \
	$(FZ)/libtinysecurity_module.so

$(FZ)/fuzz_%:
	@mkdir -p $(dir $@)
	$(call msg,FUZZ,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_SAN) -o $@ $(filter %.c,$^) $(FUZZ_LIBS)

fuzz: deps fuzz-deps $(addprefix $(FZ)/fuzz_,$(FUZZERS))
	$(Q)for f in $(FUZZERS); do \
		mkdir -p $(FZ)/corpus/$$f; \
		dict=; [ -f tests/fuzz/$$f.dict ] && dict=-dict=tests/fuzz/$$f.dict; \
		echo "fuzz $$f: $(FUZZ_SECONDS) s"; \
		$(FZ)/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=2048 \
			-print_final_stats=0 -artifact_prefix=$(FZ)/$$f- $$dict \
			$(FZ)/corpus/$$f tests/fuzz/corpus/$$f \
			2> $(FZ)/$$f.log || { tail -40 $(FZ)/$$f.log; exit 1; }; \
		grep -E '^(#[0-9]+ *DONE|Done)' $(FZ)/$$f.log | tail -1; \
	done

# ---- install and release archives (always the release build) ----

R := build/release
DIST_NAME := tinysecurity-$(VERSION)-linux-x86_64
DIST_PREFIX ?= /opt/tinysecurity
subst_in = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g'

install:
	$(Q)$(MAKE) --no-print-directory MODE=release build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/tinysecurity \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/tinysecurity \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8 \
		$(DESTDIR)$(PREFIX)/share/man/man5 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d \
		$(DESTDIR)$(PREFIX)/share/doc/tinysecurity \
		$(DESTDIR)$(PREFIX)/share/tinysecurity/examples \
		$(DESTDIR)$(PREFIX)/share/tinysecurity/systemd \
		$(DESTDIR)$(PREFIX)/lib/sysusers.d
	install -m 0755 $(R)/tsec $(R)/tsec-broker $(R)/verify_module $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(R)/libtinysecurity_module.so $(DESTDIR)$(PREFIX)/lib/tinysecurity/
	install -m 0644 $(R)/libtinysecurity.a $(DESTDIR)$(PREFIX)/lib/
	install -m 0755 $(R)/libtinysecurity.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libtinysecurity.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libtinysecurity.so
	install -m 0644 include/tinysecurity/*.h $(DESTDIR)$(PREFIX)/include/tinysecurity/
	$(subst_in) packaging/tinysecurity.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tinysecurity.pc
	$(subst_in) packaging/tsec.1 > $(DESTDIR)$(PREFIX)/share/man/man1/tsec.1
	$(subst_in) packaging/tsec-broker.8 > $(DESTDIR)$(PREFIX)/share/man/man8/tsec-broker.8
	$(subst_in) packaging/tinysecurity-policy.5 > \
		$(DESTDIR)$(PREFIX)/share/man/man5/tinysecurity-policy.5
	install -m 0644 packaging/tsec.bash-completion \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/tsec
	install -m 0644 packaging/tsec.zsh-completion $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_tsec
	install -m 0644 packaging/tsec.fish \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/tsec.fish
	install -m 0644 README.md LICENSE SECURITY.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/tinysecurity/
	$(subst_in) packaging/tsec-broker.service.in > \
		$(DESTDIR)$(PREFIX)/share/tinysecurity/systemd/tsec-broker.service
	install -m 0644 examples/policy.json examples/policy.test.json \
		$(DESTDIR)$(PREFIX)/share/tinysecurity/examples/
	$(subst_in) packaging/broker.json.in > \
		$(DESTDIR)$(PREFIX)/share/tinysecurity/examples/broker.json
	install -m 0644 packaging/tinysecurity.sysusers \
		$(DESTDIR)$(PREFIX)/lib/sysusers.d/tinysecurity.conf
	# The Go binding's sources by import path (as Debian keeps Go code),
	# with its go.mod: a module-mode program requires it from there.
	install -d $(DESTDIR)$(PREFIX)/share/gocode/src/tinysecurity.dev/tsecstorage/cmd/tsec-certmagic
	install -m 0644 bindings/go/tsecstorage/go.mod $(filter-out %_test.go,$(wildcard \
		bindings/go/tsecstorage/*.go)) $(DESTDIR)$(PREFIX)/share/gocode/src/tinysecurity.dev/tsecstorage/
	install -m 0644 bindings/go/tsecstorage/cmd/tsec-certmagic/main.go \
		$(DESTDIR)$(PREFIX)/share/gocode/src/tinysecurity.dev/tsecstorage/cmd/tsec-certmagic/

# A release archive and its SHA256SUMS, in build/dist/.
dist:
	rm -rf build/dist && mkdir -p build/dist/stage
	$(Q)$(MAKE) --no-print-directory install PREFIX=$(DIST_PREFIX) \
		DESTDIR=$(CURDIR)/build/dist/stage
	mv build/dist/stage$(DIST_PREFIX) build/dist/$(DIST_NAME)
	rm -rf build/dist/stage
	install -m 0644 README.md LICENSE build/dist/$(DIST_NAME)/
	printf 'Unpack into $(DIST_PREFIX) (the paths inside, in tinysecurity.pc and\nthe systemd unit, name it):\n  sudo mkdir -p $(DIST_PREFIX) && sudo tar -C $(DIST_PREFIX) --strip-components=1 -xzf $(DIST_NAME).tar.gz\n' \
		> build/dist/$(DIST_NAME)/INSTALL
	tar -C build/dist --owner=0 --group=0 --numeric-owner -czf build/dist/$(DIST_NAME).tar.gz $(DIST_NAME)
	cd build/dist && sha256sum $(DIST_NAME).tar.gz > SHA256SUMS
	@echo "build/dist/$(DIST_NAME).tar.gz"; cat build/dist/SHA256SUMS

# ---- objects ----

$(B)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

# Library and module objects: symbols hidden unless marked for export.
$(B)/mobj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(MODULE_OPT) -fvisibility=hidden -c -o $@ $<

$(MODULE_SO): $(MODULE_OBJ) module/module.map
	$(call msg,LD,$@)
	$(Q)$(CC) -shared -o $@ $(MODULE_OBJ) $(ALL_LDFLAGS) \
		-Wl,--version-script=module/module.map -Wl,-z,defs -Wl,-z,now \
		$(JANSSON_LIBS) $(CRYPTO_LIBS)

$(BROKER_A): $(BROKER_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# Only what the public headers mark TSEC_API leaves the library (the
# objects are built with -fvisibility=hidden); tests/test_exports.c checks.
$(BROKER_SO_REAL): $(BROKER_OBJ)
	$(call msg,LD,$@)
	$(Q)$(CC) -shared -o $@ $^ $(ALL_LDFLAGS) -Wl,-soname,$(SONAME) -Wl,-z,defs \
		$(BROKER_LIBS)

$(BROKER_SO): $(BROKER_SO_REAL)
	$(Q)ln -sf $(notdir $<) $(B)/$(SONAME) && ln -sf $(SONAME) $@

$(VERIFY): $(B)/obj/verifier/main.o $(VERIFY_OBJ) $(BROKER_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(ARCHIVE_LIBS) $(BROKER_LIBS) -lm

$(DAEMON): $(DAEMON_OBJ) $(BROKER_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(JANSSON_LIBS) $(ZMQ_LIBS) $(BROKER_LIBS) $(MHD_LIBS)

$(CLI): $(CLI_OBJ) $(BROKER_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(JANSSON_LIBS) $(ZMQ_LIBS) $(BROKER_LIBS)

# Benchmarks that use the public API only link libtinysecurity.so (found
# beside them, $$ORIGIN, unless LD_LIBRARY_PATH names another build), so
# that perf/abba.sh runs one driver over both sides' libraries (issue
# 53, item 10: each side's own program measured a benchmark edited
# between the commits as a change in the code).  The others reach inside
# (gates, the LocalCache, the memory backend) and link the archive.
BENCH_SHARED := bench_bus bench_policy_scale bench_store bench_zmq bench_instructions \
	bench_calls bench_fleet bench_remote
BENCH_SO_LDFLAGS = -L$(B) -ltinysecurity -Wl,-rpath,'$$ORIGIN' -Wl,--enable-new-dtags

$(B)/bench_fleet $(B)/bench_remote: $(B)/%: $(B)/obj/perf/%.o $(B)/obj/perf/benchutil.o \
		$(B)/obj/common/clock.o $(B)/obj/tests/servers.o $(B)/obj/tests/sigv4.o \
		$(B)/obj/tests/httpfake.o $(BROKER_SO)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $(filter %.o,$^) $(ALL_LDFLAGS) $(BENCH_SO_LDFLAGS) $(BROKER_LIBS) -lm

$(addprefix $(B)/,$(filter-out bench_fleet bench_remote,$(BENCH_SHARED))): $(B)/%: \
		$(B)/obj/perf/%.o $(B)/obj/perf/benchutil.o $(B)/obj/common/clock.o $(BROKER_SO)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $(filter %.o,$^) $(ALL_LDFLAGS) $(BENCH_SO_LDFLAGS) $(BROKER_LIBS) -lm

# Two modules' answers to the same generated requests (perf/compare_modules.c).
$(B)/compare_modules: $(B)/obj/perf/compare_modules.o $(BROKER_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(BROKER_LIBS)

$(B)/bench_%: $(B)/obj/perf/bench_%.o $(B)/obj/perf/benchutil.o $(BROKER_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(BROKER_LIBS) -lm

# ---- tests ----

TEST_DEFS = -DTSEC_BUILD_DIR='"$(B)"'
TEST_MODULE_OBJ := $(filter-out $(B)/mobj/module/entry.o,$(MODULE_OBJ))

# The flags stamp (above) is written while the Makefile is read.
$(FLAGS_STAMP): ;


$(B)/tobj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(TEST_DEFS) -c -o $@ $<

# Unit tests of module internals link the module's objects statically.
# A change of flags rebuilds (a shell script; runs make in a build root
# of its own).
$(B)/tests/test_build_flags: tests/test_build_flags.sh
	@mkdir -p $(dir $@)
	$(call msg,GEN,$@)
	$(Q)cp $< $@ && chmod +x $@

# docs/HACKING.md's folder map against the tree (a shell script).
$(B)/tests/test_hacking: tests/test_hacking.sh
	@mkdir -p $(dir $@)
	$(call msg,GEN,$@)
	$(Q)cp $< $@ && chmod +x $@

# The broker under its unit's sandboxing (a shell script; root only).
$(B)/tests/test_sandbox: tests/test_sandbox.sh
	@mkdir -p $(dir $@)
	$(call msg,GEN,$@)
	$(Q)sed 's|@B@|$(B)|' $< > $@ && chmod +x $@

# Every command line the documentation shows (a shell script).
$(B)/tests/test_docs: tests/test_docs.sh
	@mkdir -p $(dir $@)
	$(call msg,GEN,$@)
	$(Q)sed 's|@B@|$(B)|' $< > $@ && chmod +x $@

$(B)/tests/test_key $(B)/tests/test_match $(B)/tests/test_compile \
		$(B)/tests/test_cert: \
		$(B)/tests/test_%: $(B)/tobj/tests/test_%.o $(B)/tobj/tests/certgen.o \
		$(TEST_MODULE_OBJ) $(B)/mobj/common/certinfo.o
	@mkdir -p $(dir $@)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(JANSSON_LIBS) $(CRYPTO_LIBS) $(CMOCKA_LIBS)

$(B)/tests/test_verifier $(B)/tests/test_archive: $(B)/tests/test_%: \
		$(B)/tobj/tests/test_%.o $(B)/tobj/tests/testutil.o $(VERIFY_OBJ) \
		$(BROKER_A)
	@mkdir -p $(dir $@)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(CMOCKA_LIBS) $(ARCHIVE_LIBS) $(BROKER_LIBS) -lm

$(B)/tests/test_daemon $(B)/tests/test_daemon_ops $(B)/tests/test_daemon_cli $(B)/tests/test_obtain: \
		$(B)/tests/test_%: \
		$(B)/tobj/tests/test_%.o $(B)/tobj/tests/daemon_harness.o \
		$(B)/tobj/tests/testutil.o $(B)/tobj/tests/certgen.o $(B)/tobj/tests/servers.o \
		$(B)/tobj/tests/sigv4.o $(B)/tobj/tests/httpfake.o $(B)/tobj/tests/faults.o $(BROKER_A)
	@mkdir -p $(dir $@)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(JANSSON_LIBS) $(CMOCKA_LIBS) $(BROKER_LIBS)

# (chaos_check.o: the chaos suite's history checker; remote_harness.o and
# conformance_harness.o the variants and helpers of two suites each.)
$(B)/tests/test_chaos: $(B)/tobj/tests/chaos_check.o
$(B)/tests/test_remote $(B)/tests/test_remote_attacks: $(B)/tobj/tests/remote_harness.o
$(B)/tests/test_conformance $(B)/tests/test_conformance_locks: \
	$(B)/tobj/tests/conformance_harness.o
$(B)/tests/test_%: $(B)/tobj/tests/test_%.o $(B)/tobj/tests/testutil.o \
		$(B)/tobj/tests/certgen.o $(B)/tobj/tests/servers.o $(B)/tobj/tests/sigv4.o \
		$(B)/tobj/tests/httpfake.o $(B)/tobj/tests/faults.o $(BROKER_A)
	@mkdir -p $(dir $@)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(ALL_LDFLAGS) $(JANSSON_LIBS) $(CMOCKA_LIBS) $(BROKER_LIBS)

$(B)/fixtures/%.so: tests/fixtures/%.c include/tinysecurity/module.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-override-init $(TEST_DEFS) -shared -fvisibility=hidden -o $@ $< \
		$(ALL_LDFLAGS) -ldl

$(B)/fixtures/not_elf.so: tests/fixtures/not_elf.txt
	@mkdir -p $(dir $@)
	$(Q)cp $< $@

-include $(shell find build/$(BUILD_NAME) -name '*.d' 2>/dev/null)
