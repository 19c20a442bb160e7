# ratelimitd - build, test, run and benchmark.
#
#   make            build build/ratelimitd, build/ratelimit-replay (and the core library build/librl.a)
#   make run        build and start the service on config/default.json (127.0.0.1:8080)
#   make test       build and run the unit and integration tests
#   make settings-doc  rewrite docs/configuration.md's settings tables from the settings table
#                      (and those of the manual page docs/man/ratelimitd.8)
#   make deb        build/deb/ratelimitd_<version>_<arch>.deb (packaging/debian/)
#   make docs-check    run the curl examples of README.md and docs/api.md against a fresh daemon
#   make clients-check the Python and Node clients (clients/) against a fresh daemon
#   make bench      optimised build and the benchmarks (not part of make test)
#   make deps       install the Debian packages the build, tests and benchmarks need (as root)
#   make SANITIZE=address,undefined test     tests under sanitizers
#   make fuzz       each fuzz target under libFuzzer for FUZZ_SECONDS (60), new inputs kept
#   make soak       clients far past capacity against both stores: latency, errors, RSS
#   make V=1        show the commands

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
CFLAGS  ?= -O2 -g
comma   := ,
# Sanitizer builds get their own directory so objects never mix.
BUILD   ?= build$(if $(SANITIZE),-$(subst $(comma),-,$(SANITIZE)))

WARN := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wformat=2 -Wvla -Werror
BASE_CPPFLAGS := -D_DEFAULT_SOURCE -Iinclude -MMD -MP
# generated headers (redis_args.h) for the service and the tests
GEN_CPPFLAGS := -I$(BUILD)/gen
ifneq ($(SANITIZE),)
  SAN := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
endif
# What every test process gets: the build it tests; under the sanitizers, LeakSanitizer checks
# each process of the ASan build at its exit, and ThreadSanitizer's first report fails the
# process (halt_on_error) instead of being only printed.
TEST_ENV  := RL_BUILD=$(BUILD) ASAN_OPTIONS=detect_leaks=1 \
             TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# Libraries come from pkg-config; the core library uses none of them.
# A library added here goes into both apt-get lines of the Dockerfile too (make container-test).
PKG_SVC  := jansson libmicrohttpd hiredis libprotobuf-c libnghttp2 yaml-0.1
# TLS on the gRPC port (service/net/tls.c): GnuTLS, the library libmicrohttpd serves HTTPS with
PKG_SVC  += gnutls
# the rules' alerts: POSTs to alert_webhook (service/app/alerts.c)
PKG_SVC  += libcurl
PKG_TEST := check
PKG_ALL  := $(PKG_SVC) $(PKG_TEST)
pc_cflags = $(shell pkg-config --cflags $(1) 2>/dev/null)
pc_libs   = $(shell pkg-config --libs $(1) 2>/dev/null)

ifeq ($(V),1)
  Q :=
  say :=
else
  Q := @
  say = @printf '  %-6s %s\n' $(1) $(2);
endif

ALL_CFLAGS := $(WARN) $(CFLAGS) $(SAN) -pthread -fPIC
LDFLAGS_ALL := $(LDFLAGS) $(SAN) -pthread -rdynamic

# ---- the core: no HTTP, JSON or Redis on its include path -----------------------------------
CORE_SRC := $(wildcard service/core/*.c) $(wildcard service/core/rules/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)

$(BUILD)/service/core/%.o: service/core/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/librl.a: $(CORE_OBJ)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# ---- the service ------------------------------------------------------------------------
# The wings of the daemon (service/<wing>/*.c); service/main.c is the composition root.
WINGS       := app net config http grpc redis
SVC_LIB_SRC := $(foreach w,$(WINGS),$(wildcard service/$(w)/*.c))
SVC_LIB_OBJ := $(SVC_LIB_SRC:%.c=$(BUILD)/%.o)
SVC_CFLAGS  := $(call pc_cflags,$(PKG_SVC))
SVC_LIBS    := $(call pc_libs,$(PKG_SVC)) -ldl -lm

# The gRPC messages: C from api/**/*.proto by protoc-c at build time, into $(PB_DIR) (on the
# include path of the service and the tests as "envoy/service/ratelimit/v3/rls.pb-c.h").
PROTOS  := $(patsubst api/%,%,$(shell find api -name '*.proto' | sort))
PB_DIR  := $(BUILD)/gen/pb
PB_C    := $(PROTOS:%.proto=$(PB_DIR)/%.pb-c.c)
PB_H    := $(PB_C:.c=.h)
PB_OBJ  := $(PB_C:.c=.o)
SVC_CFLAGS += -I$(PB_DIR)

$(PB_DIR)/%.pb-c.c $(PB_DIR)/%.pb-c.h: api/%.proto
	@mkdir -p $(PB_DIR)
	$(call say,PROTOC,$<)
	$(Q)protoc-c -Iapi --c_out=$(PB_DIR) $*.proto

$(PB_DIR)/%.pb-c.o: $(PB_DIR)/%.pb-c.c | $(PB_H)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/service/%.o: service/%.c | $(PB_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) $(GEN_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

# The Redis store's Lua scripts, embedded as C arrays (an array, not a string literal: ISO C
# only promises string literals of 4095 bytes). rld_lua_lib is bigint.lua then lib.lua, one
# chunk (lib.lua uses bigint.lua's locals); rld_lua_ports each rule type's port
# (service/core/rules/*.lua); each script's body is its Lua offsets (from args.def) and its own
# file. service/redis/lua.c puts them together, with the plug-ins' ports after the built-in
# ones, as plain scripts and as one Redis Functions library.
LUA_WITH_LIB := decide settle release due undo
LUA_PLAIN    := heartbeat quota duty
LUA_RULES    := $(sort $(filter-out %.fast.lua,$(wildcard service/core/rules/*.lua)))
# the rule types' steps of the decision script's fast path (tools/fast_path.awk)
LUA_FAST     := $(sort $(wildcard service/core/rules/*.fast.lua))
LUA_ARGS     := service/redis/args.def
lua_array = echo "const char $(1)[] = {"; cat $(2) | od -An -v -tx1 | \
    sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0};';
# A script's Lua offsets: local A_NOW, ..., A_FIELDS = 1, ..., n (and I_ for its items).
lua_args = awk -v s=$(1) '$$1 == s || $$1 == s "_item" { p = $$1 == s ? "A_" : "I_"; n = ""; \
    v = ""; for (i = 2; i <= NF; i++) { n = n p toupper($$i) ", "; v = v (i - 1) ", " } \
    print "local " n p "FIELDS = " v (NF - 1) }' $(LUA_ARGS)

$(BUILD)/gen/redis_args.h: $(LUA_ARGS) Makefile
	@mkdir -p $(dir $@)
	$(call say,GEN,$@)
	$(Q){ echo '/* generated from service/redis/args.def by the Makefile: do not edit */'; \
	  echo '#ifndef RLD_REDIS_ARGS_H'; echo '#define RLD_REDIS_ARGS_H'; \
	  awk '!/^#/ && NF { printf "enum {"; for (i = 2; i <= NF; i++) \
	    printf " RLD_%s_%s,", toupper($$1), toupper($$i); printf " RLD_%s_FIELDS };\n", \
	    toupper($$1) }' $<; echo '#endif'; } > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/redis_scripts.c: $(wildcard service/redis/*.lua) $(LUA_RULES) $(LUA_FAST) \
    tools/fast_path.awk $(LUA_ARGS) Makefile
	@mkdir -p $(dir $@)
	$(call say,GEN,$@)
	$(Q){ echo '/* generated from service/redis, service/core/rules by the Makefile: do not edit */'; \
	  echo '#include <stddef.h>'; echo '#include "redis/scripts.h"'; \
	  $(call lua_array,rld_lua_lib,service/redis/bigint.lua service/redis/lib.lua) \
	  for f in $(LUA_RULES); do n=$$(basename $$f .lua); \
	    $(call lua_array,rld_lua_port_$$n,$$f) done; \
	  echo 'const rld_lua_port rld_lua_ports[] = {'; \
	  for f in $(LUA_RULES); do n=$$(basename $$f .lua); \
	    sed -n "s/^register_rule('\([a-z0-9_]*\)'.*/    {\"\1\", rld_lua_port_$$n},/p" $$f; done; \
	  echo '    {NULL, NULL}};'; \
	  for s in $(LUA_WITH_LIB); do \
	    { $(call lua_args,$$s); cat service/redis/$$s.lua; } > $@.$$s; \
	    $(call lua_array,rld_lua_body_$$s,$@.$$s) rm -f $@.$$s; \
	  done; \
	  for s in $(LUA_PLAIN); do $(call lua_array,rld_lua_$$s,service/redis/$$s.lua) done; \
	  { $(call lua_args,decide); awk -f tools/fast_path.awk $(LUA_FAST) service/redis/fast.lua; } \
	    > $@.fast; \
	  $(call lua_array,rld_lua_fast_decide,$@.fast) rm -f $@.fast; \
	  true; } > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/redis_scripts.o: $(BUILD)/gen/redis_scripts.c
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(ALL_CFLAGS) -c $< -o $@

SVC_LIB_OBJ += $(BUILD)/gen/redis_scripts.o $(PB_OBJ)

# config/default.json is built into the daemon (used when --config is not given).
$(BUILD)/gen/default_config.c: config/default.json
	@mkdir -p $(dir $@)
	$(call say,GEN,$@)
	$(Q){ echo '/* generated by the Makefile from config/default.json: do not edit */'; \
	    echo '#include <stddef.h>'; \
	    echo 'extern const char rld_default_config[];'; \
	    echo 'extern const size_t rld_default_config_len;'; \
	    echo 'const char rld_default_config[] = {'; \
	    od -An -v -tx1 $< | sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	    echo '0x00};'; \
	    echo 'const size_t rld_default_config_len = sizeof rld_default_config - 1;'; \
	} > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/default_config.o: $(BUILD)/gen/default_config.c
	$(call say,CC,$<)
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/ratelimitd: $(BUILD)/service/main.o $(BUILD)/gen/default_config.o $(SVC_LIB_OBJ) \
                     $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

# ---- tests ------------------------------------------------------------------------------
TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_CFLAGS := $(call pc_cflags,$(PKG_ALL)) -I$(PB_DIR)
TEST_LIBS := $(call pc_libs,$(PKG_ALL)) $(SVC_LIBS)
# Helpers every test links: tests/*util.c (testutil.c, srvutil.c, ...).
PLUGIN_SRC := $(wildcard tests/plugins/*.c)
PLUGINS := $(PLUGIN_SRC:tests/plugins/%.c=$(BUILD)/plugins/lib%.so)

$(BUILD)/tests/%.o: tests/%.c | $(PB_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) $(GEN_CPPFLAGS) -Iservice -Itests $(TEST_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

# Every tests/*.c that is not a test (testutil.c, redis_server.c) is linked into each test.
TEST_HELP_OBJ := $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(filter-out $(TEST_SRC),$(wildcard tests/*.c)))

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(TEST_HELP_OBJ) $(SVC_LIB_OBJ) $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(TEST_LIBS)

# A plug-in sees only the public headers; it links against nothing of the core.
$(BUILD)/plugins/lib%.so: tests/plugins/%.c include/ratelimit_rule.h
	@mkdir -p $(dir $@)
	$(call say,SO,$@)
	$(Q)$(CC) -Iinclude $(WARN) $(CFLAGS) $(SAN) -fPIC -shared $< -o $@

# ---- fuzz targets -----------------------------------------------------------------------
# Each tests/fuzz/fuzz_*.c is one libFuzzer target. In every build it is also linked with
# tests/fuzz/replay.c, which runs it once over its corpus folder (make test); make fuzz builds
# them with clang and libFuzzer, ASan and UBSan in build-fuzz/ and runs each for FUZZ_SECONDS.
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES   := $(FUZZ_SRC:tests/fuzz/%.c=%)
FUZZ_REPLAY  := $(FUZZ_NAMES:%=$(BUILD)/fuzz/%)
FUZZ_LIBFUZZER := $(FUZZ_NAMES:%=$(BUILD)/fuzz/lf_%)
FUZZ_CORPUS  := tests/fuzz/corpus
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build-fuzz

$(BUILD)/fuzz/%.o: tests/fuzz/%.c | $(PB_H)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice -Itests/fuzz $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/fuzzutil.o $(BUILD)/fuzz/replay.o \
                      $(SVC_LIB_OBJ) $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

$(BUILD)/fuzz/lf_%: $(BUILD)/fuzz/%.o $(BUILD)/fuzz/fuzzutil.o $(SVC_LIB_OBJ) $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) -fsanitize=fuzzer $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

.SECONDARY: $(FUZZ_NAMES:%=$(BUILD)/fuzz/%.o) $(BUILD)/fuzz/fuzzutil.o $(BUILD)/fuzz/replay.o

build-libfuzzer: $(FUZZ_LIBFUZZER)

# ---- the settings tables of docs/configuration.md --------------------------------------
# Made from the table in service/config/settings.c; test_config fails while the page differs.
$(BUILD)/tools/settings_doc: tools/settings_doc.c $(BUILD)/service/config/settings.o $(BUILD)/librl.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS_ALL) -lm

# ---- benchmarks -------------------------------------------------------------------------
# make bench builds in its own directory with optimisation (portable: no -march=native) and
# runs bench/run.sh, which starts what it needs on free loopback ports and stops it again.
BENCH_BUILD  := build-bench
BENCH_CFLAGS := -O2 -g -DNDEBUG
BENCH_BIN    := $(BUILD)/bench/bench_core $(BUILD)/bench/loadgen $(BUILD)/bench/lua_scripts \
                $(BUILD)/bench/bench_usage

$(BUILD)/bench/bench_core.o: bench/bench_core.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/bench/bench_core: $(BUILD)/bench/bench_core.o $(BUILD)/service/config/config.o \
                           $(BUILD)/service/config/settings.o $(BUILD)/service/app/file.o \
                           $(BUILD)/service/app/rules_json.o $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

# The Redis store's scripts as it sends them, for bench/lua_cost.sh.
$(BUILD)/bench/lua_scripts.o: bench/lua_scripts.c | $(BUILD)/gen/redis_args.h
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) $(GEN_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/bench/lua_scripts: $(BUILD)/bench/lua_scripts.o $(BUILD)/service/redis/lua.o \
                            $(BUILD)/gen/redis_scripts.o
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL)

# What counting a model call in three dimensions costs a decision (bench/callgrind_usage.sh).
$(BUILD)/bench/bench_usage.o: bench/bench_usage.c | $(BUILD)/gen/redis_args.h
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) $(GEN_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/bench/bench_usage: $(BUILD)/bench/bench_usage.o $(SVC_LIB_OBJ) $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(TEST_LIBS)

$(BUILD)/bench/loadgen: bench/loadgen.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(CFLAGS) $(SAN) -pthread $< -o $@ $(LDFLAGS) $(SAN) -pthread

# ---- adaptive concurrency: bench/adaptive.c, goodput of adaptive_concurrency against fixed
# limits on a simulated backend (bench/run.sh's "adaptive" section)
BENCH_BIN += $(BUILD)/bench/adaptive
$(BUILD)/bench/adaptive.o: bench/adaptive.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/bench/adaptive: $(BUILD)/bench/adaptive.o $(BUILD)/service/config/config.o \
                         $(BUILD)/service/config/settings.o $(BUILD)/service/app/file.o \
                         $(BUILD)/service/app/rules_json.o $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

$(BUILD)/bench/soak: bench/soak.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(CFLAGS) $(SAN) -pthread $< -o $@ $(LDFLAGS) $(SAN) -pthread

# The flood of one key at a steady rate (bench/flood.c): the cache of denials' test
# (tests/test_deny_cache.c runs it) and bench/run.sh's flood section.
$(BUILD)/bench/flood: bench/flood.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(WARN) $(CFLAGS) $(SAN) -pthread $< -o $@ $(LDFLAGS) $(SAN) -pthread
BENCH_BIN += $(BUILD)/bench/flood
$(BUILD)/tests/test_deny_cache: | $(BUILD)/bench/flood

# (after every BENCH_BIN +=: a rule's prerequisites are read where it stands)
build-bench: $(BUILD)/ratelimitd $(BENCH_BIN)

# make soak: many clients far past capacity for a bounded time, against the memory store and
# Redis (bench/soak.sh; SOAK_CLIENTS, SOAK_SECONDS, SOAK_KEYS). Not part of make test.
soak: deps-quiet
	@$(MAKE) --no-print-directory $(BUILD)/ratelimitd $(BUILD)/bench/soak
	@bench/soak.sh $(BUILD)

# ---- targets ----------------------------------------------------------------------------
# The public targets first install what is missing, then build in a second make, so that
# pkg-config is asked after the packages are there.
.PHONY: grpc-check
.PHONY: all run test check-core check-layers deps deps-quiet install clean format bench build-all build-test \
        build-bench settings-doc api-check docs-check container-deps container-test fuzz \
        build-libfuzzer soak
.DEFAULT_GOAL := all

all: deps-quiet
	@$(MAKE) --no-print-directory build-all

build-all: $(BUILD)/ratelimitd $(BUILD)/ratelimit-replay

# The replay and what-if tool: traces through the same core and store stack as the daemon.
REPLAY_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/replay/*.c))
$(BUILD)/tools/replay/%.o: tools/replay/%.c | $(PB_H) $(BUILD)/gen/redis_args.h
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/ratelimit-replay: $(REPLAY_OBJ) $(SVC_LIB_OBJ) $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

run: deps-quiet
	@$(MAKE) --no-print-directory build-all
	$(BUILD)/ratelimitd --config config/default.json

test: deps-quiet
	@$(MAKE) --no-print-directory check-core check-layers build-test
	@set -e; for t in $(TEST_BIN); do \
	    echo "== $$t"; $(TEST_ENV) $$t; \
	done
	@set -e; echo "== fuzz corpora"; for f in $(FUZZ_NAMES); do \
	    $(TEST_ENV) $(BUILD)/fuzz/$$f $(FUZZ_CORPUS)/$$f; \
	done
	@$(MAKE) --no-print-directory api-check
	@$(MAKE) --no-print-directory docs-check
	@$(MAKE) --no-print-directory grpc-check
	@$(MAKE) --no-print-directory grpc-tls-check
	@$(MAKE) --no-print-directory xds-check
	@$(MAKE) --no-print-directory redis-tls-check
	@$(MAKE) --no-print-directory upstream-scenarios-check
	@$(MAKE) --no-print-directory clients-check
	@$(MAKE) --no-print-directory deb-check
	@$(MAKE) --no-print-directory lua-smoke
	@$(MAKE) --no-print-directory sdk-check
	@echo "all tests passed"

# bench/lua_cost.sh's smoke run: every case of the decision script's benchmark and of its
# minimal scripts (bench/min_*.lua) runs 300 calls on a private redis-server and answers, so a
# change of the scripts' arguments (service/redis/args.def) breaks the build, not the benchmark.
# Its count of instructions under callgrind (LUA_COST_IR) too, on one case.
.PHONY: lua-smoke
lua-smoke: $(BUILD)/bench/lua_scripts
	@echo "== bench/lua_cost.sh --smoke"
	$(Q)bench/lua_cost.sh --smoke
	$(Q)LUA_COST_IR=1 LUA_COST_ONLY='concurrency*' bench/lua_cost.sh --smoke

# The gRPC server with real clients: Debian's python3-grpcio (the gRPC C core), loading the
# messages from api/*.proto through protoc. Debian's own python3, which has the grpc module.
# And @grpc/grpc-js with @grpc/proto-loader (pinned in tests/grpc-js, installed by make deps).
PYTHON ?= /usr/bin/python3
GRPC_NODE := tests/grpc-js/node_modules/.installed
$(GRPC_NODE): tests/grpc-js/package.json tests/grpc-js/package-lock.json
	$(call say,NPM,tests/grpc-js)
	$(Q)cd tests/grpc-js && npm ci --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.installed

grpc-check: $(GRPC_NODE) $(BUILD)/ratelimitd
	@echo "== tests/grpc/test_grpc.py (python3-grpcio)"
	$(Q)$(TEST_ENV) $(PYTHON) tests/grpc/test_grpc.py
	@echo "== tests/grpc/test_grpc_yaml.py (python3-grpcio, a YAML configuration)"
	$(Q)$(TEST_ENV) $(PYTHON) tests/grpc/test_grpc_yaml.py
	@echo "== tests/grpc-js (node --test, @grpc/grpc-js)"
	$(Q)cd tests/grpc-js && $(TEST_ENV) RL_BUILD=$(abspath $(BUILD)) node --test

# TLS and mTLS on the gRPC port (net/'s GnuTLS): python3-grpcio against certificates the test
# makes with openssl, configured natively and by envoyproxy/ratelimit's variables.
.PHONY: grpc-tls-check
grpc-tls-check: $(BUILD)/ratelimitd
	@echo "== tests/grpc/test_grpc_tls.py (python3-grpcio over TLS and mTLS)"
	$(Q)$(TEST_ENV) $(PYTHON) tests/grpc/test_grpc_tls.py

# Configuration over xDS (CONFIG_TYPE=GRPC_XDS_SOTW): an ADS management server in
# python3-grpcio pushes, updates, breaks and restarts; and over TLS, with a wrong CA.
.PHONY: xds-check
xds-check: $(BUILD)/ratelimitd
	@echo "== tests/grpc/test_xds.py (python3-grpcio as the xDS management server)"
	$(Q)$(TEST_ENV) $(PYTHON) tests/grpc/test_xds.py

# ---- envoyproxy/ratelimit's own scenarios ------------------------------------------------------
# Its test/config, test/integration and test/service cases re-expressed as YAML files and gRPC
# calls (python3-grpcio), on the memory store and on a private redis-server; the table of every
# case (same, deliberate difference, not applicable) heads the test file.
.PHONY: upstream-scenarios-check
upstream-scenarios-check: $(BUILD)/ratelimitd
	@echo "== tests/grpc/test_upstream_scenarios.py (envoyproxy/ratelimit's scenarios)"
	$(Q)$(TEST_ENV) $(PYTHON) tests/grpc/test_upstream_scenarios.py

# ---- Redis over TLS -----------------------------------------------------------------------------
# The store over TLS on Debian's redis-server started with --tls-port (one node, client
# certificates, a wrong CA, the hostname, a cluster with --tls-cluster), with certificates the
# test makes with openssl, configured natively and by envoyproxy/ratelimit's REDIS_TLS_*.
.PHONY: redis-tls-check
redis-tls-check: $(BUILD)/ratelimitd
	@echo "== tests/redis_tls/test_redis_tls.py (the Redis store over TLS)"
	$(Q)$(TEST_ENV) $(PYTHON) tests/redis_tls/test_redis_tls.py

# ---- the clients: clients/python and clients/node ----------------------------------------------
# Each against a real daemon: the Python one with Debian's python3 and its python3-starlette
# (ASGI), python3-flask (WSGI), python3-yaml (the contract) and python3-pip (installing it); the
# Node one with node --test and express and yaml from npm, pinned by
# clients/node/package-lock.json and installed by make deps.
.PHONY: clients-check clients-deps
CLIENTS_NODE := clients/node/node_modules/.installed
$(CLIENTS_NODE): clients/node/package.json clients/node/package-lock.json
	$(call say,NPM,clients/node)
	$(Q)cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.installed

# The Python modules come from Debian: make deps installs them when one is missing.
clients-deps:
	@$(PYTHON) -c 'import flask, starlette.testclient, yaml, pip, setuptools' 2>/dev/null || $(MAKE) --no-print-directory deps

clients-check: clients-deps $(CLIENTS_NODE) $(BUILD)/ratelimitd
	@echo "== clients/python (python3 -m unittest: the client, starlette, flask, the contract, the README, pip)"
	$(Q)cd clients/python/tests && $(TEST_ENV) RL_BUILD=$(abspath $(BUILD)) PYTHONPATH=.. \
	    PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m unittest discover -s . -p 'test_*.py'
	@echo "== clients/node (node --test: the client, express, the contract, the README, npm pack)"
	$(Q)cd clients/node && $(TEST_ENV) RL_BUILD=$(abspath $(BUILD)) node --test test/*.test.js

# The API document: redocly's lint (every warning an error) and tests/api/openapi.test.js, which
# calls every documented operation of the real daemon and validates each answer with ajv. The
# npm packages are pinned by tests/api/package-lock.json and installed there (npm ci).
API_NODE := tests/api/node_modules/.installed
$(API_NODE): tests/api/package.json tests/api/package-lock.json
	$(call say,NPM,tests/api)
	$(Q)cd tests/api && npm ci --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.installed

api-check: $(API_NODE) $(BUILD)/ratelimitd
	@echo "== redocly lint api/openapi.yaml"
	$(Q)cd tests/api && npx --no-install redocly lint --config redocly.yaml --format stylish \
	    ../../api/openapi.yaml
	@echo "== tests/api (node --test)"
	$(Q)cd tests/api && $(TEST_ENV) RL_BUILD=$(abspath $(BUILD)) node --test

# The model SDKs with real clients: the official openai and @anthropic-ai/sdk packages (pinned
# by tests/sdk/package-lock.json, installed there by npm ci) against a small model API in node
# (tests/sdk/model_api.js) that asks the daemon before answering and passes its OpenAI and
# Anthropic rate-limit headers on; the SDKs' retries wait as the 429 says (real clock).
.PHONY: sdk-check
SDK_NODE := tests/sdk/node_modules/.installed
$(SDK_NODE): tests/sdk/package.json tests/sdk/package-lock.json
	$(call say,NPM,tests/sdk)
	$(Q)cd tests/sdk && npm ci --no-audit --no-fund --loglevel=error >/dev/null && touch node_modules/.installed

sdk-check: $(SDK_NODE) $(BUILD)/ratelimitd
	@echo "== tests/sdk (node --test, openai and @anthropic-ai/sdk)"
	$(Q)cd tests/sdk && $(TEST_ENV) RL_BUILD=$(abspath $(BUILD)) node --test

build-test: $(BUILD)/ratelimitd $(BUILD)/ratelimit-replay $(TEST_BIN) $(PLUGINS) $(FUZZ_REPLAY)

# Every target for FUZZ_SECONDS; what grows coverage is merged into its corpus folder, a crash
# or broken invariant stops with the input in $(FUZZ_BUILD)/crash-<target>-*.
fuzz: deps-quiet
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang SANITIZE=address,undefined \
	    CFLAGS='-O1 -g -fsanitize=fuzzer-no-link' build-libfuzzer
	@set -e; for f in $(FUZZ_NAMES); do \
	    echo "== $$f ($(FUZZ_SECONDS) s)"; rm -rf $(FUZZ_BUILD)/new/$$f; \
	    mkdir -p $(FUZZ_BUILD)/new/$$f $(FUZZ_CORPUS)/$$f; \
	    $(FUZZ_BUILD)/fuzz/lf_$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crash-$$f- \
	        $(FUZZ_BUILD)/new/$$f $(FUZZ_CORPUS)/$$f 2>$(FUZZ_BUILD)/$$f.log \
	        || { tail -60 $(FUZZ_BUILD)/$$f.log; exit 1; }; \
	    grep -E '^stat::(number_of_executed_units|new_units_added)' $(FUZZ_BUILD)/$$f.log; \
	    $(FUZZ_BUILD)/fuzz/lf_$$f -merge=1 $(FUZZ_CORPUS)/$$f $(FUZZ_BUILD)/new/$$f \
	        2>>$(FUZZ_BUILD)/$$f.log; \
	done; echo "fuzz: no crash in $(FUZZ_NAMES)"

settings-doc: deps-quiet
	@$(MAKE) --no-print-directory $(BUILD)/tools/settings_doc
	$(BUILD)/tools/settings_doc docs/configuration.md
	$(BUILD)/tools/settings_doc --man docs/man/ratelimitd.8

# The curl examples of README.md and docs/api.md, each run against a fresh daemon and its answer
# compared with the page (tests/docs/docs.test.js; node's own test runner, no npm package).
docs-check: $(BUILD)/ratelimitd
	@echo "== tests/docs (node --test: the examples of README.md and docs/api.md)"
	$(Q)cd tests/docs && $(TEST_ENV) RL_BUILD=$(abspath $(BUILD)) node --test

# Test objects are kept (not removed as intermediates), so a second make rebuilds nothing.
.SECONDARY: $(TEST_HELP_OBJ) $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.o) $(PB_C) $(PB_H)

# Every object of the service and the tests may include the generated argument indices.
$(SVC_LIB_OBJ) $(BUILD)/service/main.o $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.o): \
    | $(BUILD)/gen/redis_args.h

# The core must compile with nothing but include/ and the C library on its include path: a
# copy of the system include directory without the HTTP, JSON, Redis and test libraries.
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
# Files of the service that may name rule types: none (the YAML mapping asks the registry which
# types take a limit of n per unit: rl_rule_per_unit, declared by each type in its own file).
NAMES_ALLOWED :=
check-core:
	@rm -rf $(BUILD)/sysinc && mkdir -p $(BUILD)/sysinc
	@for e in /usr/include/*; do case $${e##*/} in \
	    jansson*|microhttpd*|hiredis|curl|check*|$(MULTIARCH)) ;; \
	    *) ln -s $$e $(BUILD)/sysinc/ ;; esac; done
	$(Q)for f in $(CORE_SRC); do \
	    $(CC) -nostdinc -isystem $$($(CC) -print-file-name=include) -isystem $(BUILD)/sysinc \
	        -isystem /usr/include/$(MULTIARCH) -D_DEFAULT_SOURCE -Iinclude $(WARN) \
	        -fsyntax-only $$f || exit 1; \
	done; echo "check-core: the core compiles without HTTP, JSON or Redis headers"
	@names=$$(sed -n 's/.*\.name = "\([a-z_]*\)".*/\1/p' service/core/rules/*.c | paste -sd'|'); \
	tags=$$(sed -n 's/.*\.tag = "\([a-z0-9_]*\)".*/\1/p' service/core/rules/*.c | paste -sd'|'); \
	if grep -nwE "$$names" $(filter-out service/core/rules/%,$(CORE_SRC)) service/core/*.h \
	    $(filter-out $(NAMES_ALLOWED),$(SVC_LIB_SRC) service/main.c); then \
	    echo "check-core: a rule type is named outside its own files (above)"; exit 1; fi; \
	if grep -nE "[\"']($$tags)[\"'|]" $(filter-out $(NAMES_ALLOWED),$(SVC_LIB_SRC) service/main.c) \
	    $(wildcard service/*/*.h) service/redis/*.lua; then \
	    echo "check-core: a rule type's Redis tag is named outside its own files (above)"; \
	    exit 1; fi; \
	echo "check-core: no rule type ($$names) nor its Redis tag ($$tags) is named outside" \
	    "service/core/rules/"
	@if grep -n CLOCK_REALTIME $(filter-out service/app/log.c service/http/http1.c,$(SVC_LIB_SRC)); then \
	    echo "check-core: the wall clock is read outside service/main.c (above)"; exit 1; fi; \
	echo "check-core: only service/main.c reads the wall clock for decisions (app/log.c for" \
	    "log lines, http/http1.c for the Date header)"

# The layering of the daemon's wings (tools/check_layers.sh): the tree must follow it, and
# tests/layers/, which breaks each rule once, must fail with exactly its 7 violations.
check-layers:
	$(Q)tools/check_layers.sh .
	$(Q)n=$$(tools/check_layers.sh tests/layers 2>&1 | grep -c '^service/' || true); \
	if [ "$$n" != 7 ]; then echo "check-layers: the broken tree gave $$n violations, not 7"; \
	    exit 1; fi; echo "check-layers: the broken tree tests/layers fails with its 7 violations"

# Debian packages the build, the tests and the benchmarks use.
DEB_PKGS := gcc libc6-dev make pkg-config libjansson-dev libmicrohttpd-dev check libsubunit-dev \
            libcurl4-openssl-dev libhiredis-dev redis-server redis-sentinel redis-tools nginx wrk curl \
            prometheus clang libclang-rt-14-dev libyaml-dev openssl
# bench/callgrind_core.sh (instructions per decision; not part of make test or make bench)
DEB_PKGS += valgrind
# gRPC: messages, HTTP/2, the Python client (grpcio, protobuf, protoc), h2load
DEB_PKGS += libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev nghttp2-client protobuf-compiler \
            python3 python3-grpcio python3-protobuf
# TLS in net/ (gRPC's port: tests/grpc/test_grpc_tls.py makes its certificates with openssl)
DEB_PKGS += libgnutls28-dev
# Caddy in front (config/caddy/Caddyfile, tests/test_caddy.c)
DEB_PKGS += caddy
# Redis over TLS (tests/redis_tls/test_redis_tls.py): the system's CAs, used without store.tls.ca
DEB_PKGS += ca-certificates
# the Python client's tests (clients/python): ASGI (starlette's TestClient uses httpx), WSGI,
# YAML, and installing the package with pip
DEB_PKGS += python3-starlette python3-httpx python3-flask python3-yaml python3-pip python3-setuptools
# the rules' alerts (service/app/alerts.c sends them with libcurl)
DEB_PKGS += libcurl4-openssl-dev
# the calendar rule's time zones (service/core/tz.c reads /usr/share/zoneinfo)
DEB_PKGS += tzdata
# make deb and make deb-check: debhelper, lintian, man, systemd-analyze, strace, pgrep and kill
DEB_PKGS += debhelper dpkg-dev lintian man-db systemd strace procps
# node and npm for tests/api, looked for by command: a machine may have node from another
# packaging that brings its own npm (Debian's npm would conflict with it).
NODE_PKGS := nodejs npm
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done; \
	    command -v npm >/dev/null || echo $(NODE_PKGS)); \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing" | tr '\n' ' '; echo; \
	    if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root to install:$$missing"; exit 1; fi; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "make deps: apt-get failed"; exit 1; }; \
	fi
	@$(MAKE) --no-print-directory $(API_NODE) $(GRPC_NODE)
	@$(MAKE) --no-print-directory $(CLIENTS_NODE)
	@$(MAKE) --no-print-directory $(SDK_NODE)

# Installs only when something is missing; quiet otherwise.
deps-quiet:
	@command -v protoc-c >/dev/null && pkg-config --exists $(PKG_ALL) hiredis 2>/dev/null && command -v redis-server >/dev/null \
	    && command -v redis-sentinel >/dev/null && command -v redis-cli >/dev/null \
	    && test -x /usr/sbin/nginx && command -v promtool >/dev/null && command -v npm >/dev/null \
	    && test -x /usr/bin/caddy \
	    && command -v dh >/dev/null && command -v lintian >/dev/null \
	    || $(MAKE) --no-print-directory deps

# ---- the Debian package, the systemd unit, the manual pages ---------------------------------
# make deb: $(BUILD)/deb/ratelimitd_<version>_<arch>.deb and ratelimitd-dev_<version>_all.deb,
# built with debhelper from a copy of packaging/debian/ (packaging/deb.sh); the version is
# RL_VERSION in include/ratelimit.h. The programs in it are built by this Makefile with Debian's
# hardening flags in DEB_BUILD (make deb DEB_BUILD=build packs the test build's instead).
# make deb-check: lintian, the unit through systemd-analyze, the package unpacked and its daemon
# run on its default configuration (tests/deb/run.sh).
DEB_BUILD ?= build-deb
.PHONY: deb deb-check
deb: deps-quiet
	@packaging/deb.sh $(BUILD) $(DEB_BUILD)

deb-check: deb $(BUILD)/tools/settings_doc
	@echo "== tests/deb/run.sh (the Debian package)"
	@tests/deb/run.sh $(BUILD)

# make container-test: the Dockerfile built with buildah on a debootstrapped bookworm and its
# image run (tests/container/run.sh; as root, with the network to Debian's mirror). The base
# root filesystem and the images are kept under $(BUILD)/container, so a second run is fast.
CONTAINER_PKGS := debootstrap buildah iproute2 curl
container-deps:
	@missing=$$(for p in $(CONTAINER_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing" | tr '\n' ' '; echo; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "make container-deps: apt-get failed"; exit 1; }; \
	fi

container-test: container-deps
	@tests/container/run.sh $(BUILD)

# (deps, not deps-quiet: wrk and nginx are checked too)
bench: deps
	@$(MAKE) -s --no-print-directory BUILD=$(BENCH_BUILD) CFLAGS='$(BENCH_CFLAGS)' build-bench >&2
	@bench/run.sh $(BENCH_BUILD)

install: $(BUILD)/ratelimitd
	install -D -m 0755 $(BUILD)/ratelimitd $(DESTDIR)$(PREFIX)/bin/ratelimitd
	install -D -m 0644 include/ratelimit.h $(DESTDIR)$(PREFIX)/include/ratelimit.h
	install -D -m 0644 include/ratelimit_rule.h $(DESTDIR)$(PREFIX)/include/ratelimit_rule.h
	install -D -m 0644 include/ratelimit_store.h $(DESTDIR)$(PREFIX)/include/ratelimit_store.h

format:
	clang-format -i include/*.h service/*.[ch] service/*/*.[ch] tools/replay/*.[ch] service/core/rules/*.c tests/*.[ch] tests/plugins/*.c

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -path $(BUILD)/container -prune -o -name '*.d' -type f -print 2>/dev/null)
