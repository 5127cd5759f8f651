# tidemalloc build. `make` builds the libraries; `make test` runs every suite;
# `make bench` compares against glibc and the installed peers.
CC      ?= cc
BUILD   ?= build
VERSION := 0.1.0
SONAME  := libtidemalloc.so.0
WARN    := -Wall -Wextra -Werror
# -fno-tree-slp-vectorize: gcc merged free's two stores into the block (link
# and free mark) through an SSE register, 4 instructions for 2 (churn -5%).
# -fdata-sections with --sort-section=alignment: each variable in its own
# section, laid out by alignment, so the arrays (32-byte aligned: the arena's
# extents, the huge-block table, the segment map's page flags) come first and
# the small variables every program touches share one page after them; in
# file order they were spread over five of the twelve .bss pages, three of
# them resident in every program (docs/benchmark-history.md, thirty-third
# session). The order of the code is unchanged.
# -falign-jumps=1: no padding before jump targets (768 bytes of the code,
# which every program maps whole, for no measured speed: forty-second
# session); malloc and free are line-aligned instead (LINE_ALIGNED,
# internal.h).
CFLAGS_LIB := -std=c11 -O2 -g $(WARN) -fPIC -fvisibility=hidden -ftls-model=initial-exec \
              -fno-builtin -fno-stack-protector -fno-plt -fno-tree-slp-vectorize -fdata-sections \
              -falign-jumps=1 \
              -Iinclude -Isrc $(EXTRA_CFLAGS)
# -z pack-relative-relocs (binutils 2.38, glibc 2.36): the 83 relative
# relocations in 64 bytes of DT_RELR instead of 1,992 of RELA, so that the
# first load segment (ELF headers, dynamic symbols, relocations) fits one
# page, 4 KiB less mapped in every process (forty-sixth session;
# tests/suite-static.sh checks it). A linker without it is not given it.
PACK_RELOCS := $(shell $(CC) -shared -Wl,--fatal-warnings,-z,pack-relative-relocs -x c /dev/null \
                 -o /dev/null 2>/dev/null && echo -Wl,-z,pack-relative-relocs)
# -nostartfiles: gcc's crtbeginS.o / crtendS.o and crti.o / crtn.o bring
# 265 bytes of code every process maps (transactional-memory clone tables,
# frame registration, the __cxa_finalize call that runs a C++ library's
# destructors at dlclose) and nothing a C library uses; src/fork.c defines
# the one symbol of theirs it needs, __dso_handle (seventy-third session).
# -z nodelete: dlclose never unmaps the library, whose helper thread runs
# its code and whose blocks the program still holds (the __cxa_finalize
# call that would have unregistered the fork handlers is gone with crtbegin).
LDFLAGS_LIB := -shared -nostartfiles -Wl,-z,nodelete -Wl,-soname,$(SONAME) -Wl,-z,now $(PACK_RELOCS) \
               -Wl,--version-script=src/exports.map \
               -Wl,--sort-section=alignment -Wl,-T,src/rodata.ld -Wl,-T,src/rare.ld -Wl,-T,src/warm.ld -lpthread

LIB_SRCS := $(wildcard src/*.c)
LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
LIB_SO   := $(BUILD)/libtidemalloc.so
LIB_A    := $(BUILD)/libtidemalloc.a

.PHONY: all lib lib-nochecks test bench bench-quick clean format format-check
all: lib
lib: $(LIB_SO) $(LIB_A)

# Built for size: code that runs at start-up, in reports, at fork, around
# system calls (release passes) and blocks of 128 KiB and more, once a page
# emptied (the page cache) or a class needs a new page (segment), or in
# secure mode (check), where its own instructions are not what costs;
# functions run once a thread or a segment, and the error paths of the
# files not listed, are marked COLD (src/internal.h).
# The library's code is resident whole in every program (the kernel maps a
# file's pages 64 KiB around each fault): 16 pages with -O2 everywhere, 12
# with the first eleven of these and the read-only data moved in
# (src/rodata.ld), 11 with segment and check too; instruction counts of the
# benchmarks within the runs' spread (docs/benchmark-history.md,
# thirty-eighth and thirty-ninth sessions). The arena's lock per chunk took
# 12 again; the spin lock's wait out of line (lock) and the COLD functions
# made it 11 (fortieth session). The functions marked RARE have a segment
# of their own (src/rare.ld) that most programs never map: 9 pages of code
# resident instead of 11 (forty-fourth session). Thread exit (heap_exit) is
# run once a thread; these files share one copy of the spin lock's lock and
# unlock (src/lock.h), 1 KiB less code (forty-ninth session).
COLD_SRCS := arena arena_release fork format heap_exit huge init lock options os page_cache purge segment_release \
             size_class stats segment segment_lifecycle check shared_class fitted_class

# The Makefile too: a change of flags rebuilds (make lib-nochecks kept objects
# built with the flags before it).
$(BUILD)/obj/%.o: src/%.c $(wildcard src/*.h) include/tidemalloc.h Makefile | $(BUILD)/obj
	$(CC) $(CFLAGS_LIB) $(if $(filter $*,$(COLD_SRCS)),-Os) -c $< -o $@

$(BUILD)/obj:
	mkdir -p $@

$(LIB_SO): $(LIB_OBJS) src/exports.map src/rodata.ld src/rare.ld src/warm.ld
	$(CC) $(LIB_OBJS) $(LDFLAGS_LIB) -o $@.$(VERSION)
	ln -sf libtidemalloc.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf libtidemalloc.so.$(VERSION) $@

# The library without the default checks, only to measure their cost.
lib-nochecks:
	$(MAKE) BUILD=$(BUILD)/nochecks EXTRA_CFLAGS=-DTIDEMALLOC_NO_CHECKS $(BUILD)/nochecks/libtidemalloc.so

$(LIB_A): $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $(LIB_OBJS)

# Each fragment adds its own targets; they own their files.
-include tests/tests.mk
-include tests/glibc/glibc.mk
-include bench/bench.mk
-include tools/tools.mk
-include tests/release/release.mk
-include tests/hardening/hardening.mk
-include tests/checks/checks.mk

# Every suite prints PASS/FAIL/SKIP lines; tests/run.sh adds them up.
test: lib
	bash tests/run.sh

# Every C source of ours: the library, its tests and the benchmarks, new
# files not yet added too (--others: a test written and not yet committed
# was left unformatted, and the clean clone's check failed on it).
FORMAT_FILES = src/*.c src/*.h include/*.h $(shell git ls-files --cached --others \
	--exclude-standard 'tests/*.c' 'tests/*.cc' 'tests/*.h' 'bench/*.c' 'bench/*.h' 2>/dev/null)

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD)
