# Release-policy tests (issue 3 checks): `make release-tests` builds
# tests/release/rel_*.c into $(BUILD)/release/. tests/suite-release.sh runs
# them with the library in LD_PRELOAD; they find tidemalloc_stats with dlsym.
REL_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fno-builtin \
              -Iinclude -Itests/release $(EXTRA_TEST_CFLAGS)
REL_LDLIBS := -ldl -lpthread
REL_SRCS   := $(wildcard tests/release/rel_*.c)
REL_BINS   := $(patsubst tests/release/%.c,$(BUILD)/release/%,$(REL_SRCS))

.PHONY: release-tests
release-tests: $(REL_BINS)

$(BUILD)/release:
	mkdir -p $@

$(BUILD)/release/rel_%: tests/release/rel_%.c tests/release/release.h tests/child_stderr.h include/tidemalloc.h | $(BUILD)/release
	$(CC) $(REL_CFLAGS) $< -o $@ $(REL_LDLIBS)

# The set-uid check needs a copy linked against the library itself.
release-tests: $(BUILD)/release/rel_setuid_linked
$(BUILD)/release/rel_setuid_linked: tests/release/rel_setuid.c tests/release/release.h include/tidemalloc.h $(LIB_SO) | $(BUILD)/release
	$(CC) $(REL_CFLAGS) $< -o $@ -L$(BUILD) -l:libtidemalloc.so.0 -Wl,-rpath,$(abspath $(BUILD)) $(REL_LDLIBS)
