# ratelimitd - build, test, run and benchmark.
#
#   make            build build/ratelimitd (and the core library build/librl.a)
#   make run        build and start the service on config/default.json (127.0.0.1:8080)
#   make test       build and run the unit and integration tests
#   make bench      optimised build and the benchmarks (not part of make test)
#   make deps       install the Debian packages the build, tests and benchmarks need (as root)
#   make SANITIZE=address,undefined test     tests under sanitizers
#   make V=1        show the commands

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
CFLAGS  ?= -O2 -g
BUILD   ?= build

WARN := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wformat=2 -Wvla -Werror
BASE_CPPFLAGS := -D_DEFAULT_SOURCE -Iinclude -MMD -MP
ifneq ($(SANITIZE),)
  SAN := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
endif

# Libraries come from pkg-config; the core library uses none of them.
PKG_SVC  := jansson libmicrohttpd hiredis
PKG_TEST := check libcurl
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
SVC_LIB_SRC := $(filter-out service/main.c,$(wildcard service/*.c))
SVC_LIB_OBJ := $(SVC_LIB_SRC:%.c=$(BUILD)/%.o)
SVC_CFLAGS  := $(call pc_cflags,$(PKG_SVC))
SVC_LIBS    := $(call pc_libs,$(PKG_SVC)) -ldl -lm

$(BUILD)/service/%.o: service/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(SVC_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

# The Redis store's Lua scripts, embedded as C arrays (an array, not a string literal: ISO C
# only promises string literals of 4095 bytes). Each script is lib.lua followed by its own file.
LUA_WITH_LIB := decide settle release due
LUA_PLAIN    := heartbeat quota
$(BUILD)/gen/redis_scripts.c: $(wildcard service/redis/*.lua) Makefile
	@mkdir -p $(dir $@)
	$(call say,GEN,$@)
	$(Q){ echo '/* generated from the files in service/redis by the Makefile: do not edit */'; \
	  echo '#include "redis_scripts.h"'; \
	  for s in $(LUA_WITH_LIB) $(LUA_PLAIN); do \
	    case " $(LUA_WITH_LIB) " in *" $$s "*) lib=service/redis/lib.lua ;; *) lib= ;; esac; \
	    echo "const char rld_lua_$$s[] = {"; \
	    cat $$lib service/redis/$$s.lua | od -An -v -tx1 | sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	    echo '0};'; \
	  done; } > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/redis_scripts.o: $(BUILD)/gen/redis_scripts.c
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice $(ALL_CFLAGS) -c $< -o $@

SVC_LIB_OBJ += $(BUILD)/gen/redis_scripts.o

$(BUILD)/ratelimitd: $(BUILD)/service/main.o $(SVC_LIB_OBJ) $(BUILD)/librl.a
	$(call say,LD,$@)
	$(Q)$(CC) $^ -o $@ $(LDFLAGS_ALL) $(SVC_LIBS)

# ---- tests ------------------------------------------------------------------------------
TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_CFLAGS := $(call pc_cflags,$(PKG_ALL))
TEST_LIBS := $(call pc_libs,$(PKG_ALL)) $(SVC_LIBS)
PLUGIN_SRC := $(wildcard tests/plugins/*.c)
PLUGINS := $(PLUGIN_SRC:tests/plugins/%.c=$(BUILD)/plugins/lib%.so)

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(BASE_CPPFLAGS) -Iservice -Itests $(TEST_CFLAGS) $(ALL_CFLAGS) -c $< -o $@

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

# ---- targets ----------------------------------------------------------------------------
# The public targets first install what is missing, then build in a second make, so that
# pkg-config is asked after the packages are there.
.PHONY: all run test check-core deps deps-quiet install clean format bench build-all build-test
.DEFAULT_GOAL := all

all: deps-quiet
	@$(MAKE) --no-print-directory build-all

build-all: $(BUILD)/ratelimitd

run: deps-quiet
	@$(MAKE) --no-print-directory build-all
	$(BUILD)/ratelimitd --config config/default.json

test: deps-quiet
	@$(MAKE) --no-print-directory build-test
	@set -e; for t in $(TEST_BIN); do \
	    echo "== $$t"; RL_BUILD=$(BUILD) $$t; \
	done; echo "all tests passed"

build-test: $(if $(wildcard service/main.c),$(BUILD)/ratelimitd) $(TEST_BIN) $(PLUGINS)

# The core must compile with nothing but include/ and the C library on its include path: a
# copy of the system include directory without the HTTP, JSON, Redis and test libraries.
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
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

# Debian packages the build, the tests and the benchmarks use.
DEB_PKGS := gcc make pkg-config libjansson-dev libmicrohttpd-dev check libsubunit-dev \
            libcurl4-openssl-dev libhiredis-dev redis-server nginx wrk curl
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing" | tr '\n' ' '; echo; \
	    if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root to install:$$missing"; exit 1; fi; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "make deps: apt-get failed"; exit 1; }; \
	fi

# Installs only when something is missing; quiet otherwise.
deps-quiet:
	@pkg-config --exists $(PKG_ALL) hiredis 2>/dev/null && command -v redis-server >/dev/null \
	    || $(MAKE) --no-print-directory deps

install: $(BUILD)/ratelimitd
	install -D -m 0755 $(BUILD)/ratelimitd $(DESTDIR)$(PREFIX)/bin/ratelimitd
	install -D -m 0644 include/ratelimit.h $(DESTDIR)$(PREFIX)/include/ratelimit.h
	install -D -m 0644 include/ratelimit_rule.h $(DESTDIR)$(PREFIX)/include/ratelimit_rule.h
	install -D -m 0644 include/ratelimit_store.h $(DESTDIR)$(PREFIX)/include/ratelimit_store.h

format:
	clang-format -i include/*.h service/*.[ch] service/core/*.[ch] service/core/rules/*.c tests/*.[ch] tests/plugins/*.c

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
