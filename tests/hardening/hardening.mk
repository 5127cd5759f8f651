# Hardening tests (issue 6 items 3-6). Included by the top Makefile, which
# defines BUILD, LIB_SO and CC. Everything here builds into $(BUILD)/hardening/.
#   make hardening   build every program below (tests/suite-hardening.sh runs them)
#   make fuzz        libFuzzer run of the prefixed library (FUZZ_TIME s, default 300)
#   make soak        the stress program with the library preloaded (SOAK_TIME s, default 600)
#   make sanitize    the multithreaded test under ThreadSanitizer, UBSan and
#                    AddressSanitizer
#   make stress      the UBSan one STRESS_RUNS times beside two CPU hogs (default 80,
#                    about 6 minutes): stops at the first failure
# The OOM and soak programs use $(CC) and run with $(LIB_SO) in LD_PRELOAD. The
# fuzzer and sanitizer programs need clang: they link the library's objects,
# compiled with -DTIDEMALLOC_PREFIX (tm_malloc...), which interpose nothing.
HARD_DIR     := $(BUILD)/hardening
HARD_CLANG   ?= clang
HARD_CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fno-builtin \
                -Iinclude -Itests/hardening
HARD_LDLIBS  := -lpthread -ldl
# Prefixed library objects: same code and the same warnings as `make lib`.
HARD_PFX_CFLAGS := -std=c11 -g -Wall -Wextra -Werror -fno-builtin -fno-omit-frame-pointer \
                   -ftls-model=initial-exec -DTIDEMALLOC_PREFIX -Iinclude -Isrc
HARD_SAN_TSAN   := -fsanitize=thread -O1
HARD_SAN_UBSAN  := -fsanitize=undefined -fno-sanitize-recover=all -O1
HARD_SAN_ASAN   := -fsanitize=address -fno-sanitize-recover=all -O1
HARD_SAN_FUZZ   := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -O1
HARD_SRCS       := $(wildcard src/*.c)
HARD_DEPS       := $(wildcard src/*.h) include/tidemalloc.h tests/hardening/tm_api.h

HARD_BINS := $(HARD_DIR)/oom $(HARD_DIR)/soak
HARD_SAN_BINS := $(HARD_DIR)/mt_tsan $(HARD_DIR)/mt_ubsan $(HARD_DIR)/mt_asan $(HARD_DIR)/fuzz_alloc

.PHONY: hardening hardening-native hardening-clang fuzz soak sanitize stress
hardening: hardening-native hardening-clang
hardening-native: $(HARD_BINS)
hardening-clang: $(HARD_SAN_BINS)

$(HARD_DIR) $(HARD_DIR)/obj-tsan $(HARD_DIR)/obj-ubsan $(HARD_DIR)/obj-asan $(HARD_DIR)/obj-fuzz \
$(HARD_DIR)/fuzz-corpus $(HARD_DIR)/fuzz-artifacts:
	mkdir -p $@

$(HARD_DIR)/oom: tests/hardening/oom.c | $(HARD_DIR)
	$(CC) $(HARD_CFLAGS) $< -o $@ $(HARD_LDLIBS)

$(HARD_DIR)/soak: tests/hardening/soak.c | $(HARD_DIR)
	$(CC) $(HARD_CFLAGS) $< -o $@ $(HARD_LDLIBS)

# One object directory per sanitizer.
$(HARD_DIR)/obj-tsan/%.o: src/%.c $(HARD_DEPS) | $(HARD_DIR)/obj-tsan
	$(HARD_CLANG) $(HARD_PFX_CFLAGS) $(HARD_SAN_TSAN) -c $< -o $@
$(HARD_DIR)/obj-ubsan/%.o: src/%.c $(HARD_DEPS) | $(HARD_DIR)/obj-ubsan
	$(HARD_CLANG) $(HARD_PFX_CFLAGS) $(HARD_SAN_UBSAN) -c $< -o $@
$(HARD_DIR)/obj-asan/%.o: src/%.c $(HARD_DEPS) | $(HARD_DIR)/obj-asan
	$(HARD_CLANG) $(HARD_PFX_CFLAGS) $(HARD_SAN_ASAN) -c $< -o $@
$(HARD_DIR)/obj-fuzz/%.o: src/%.c $(HARD_DEPS) | $(HARD_DIR)/obj-fuzz
	$(HARD_CLANG) $(HARD_PFX_CFLAGS) $(HARD_SAN_FUZZ) -c $< -o $@

HARD_TSAN_OBJS  := $(patsubst src/%.c,$(HARD_DIR)/obj-tsan/%.o,$(HARD_SRCS))
HARD_UBSAN_OBJS := $(patsubst src/%.c,$(HARD_DIR)/obj-ubsan/%.o,$(HARD_SRCS))
HARD_ASAN_OBJS  := $(patsubst src/%.c,$(HARD_DIR)/obj-asan/%.o,$(HARD_SRCS))
HARD_FUZZ_OBJS  := $(patsubst src/%.c,$(HARD_DIR)/obj-fuzz/%.o,$(HARD_SRCS))

$(HARD_DIR)/mt_tsan: tests/hardening/mt_sanitize.c $(HARD_TSAN_OBJS) $(HARD_DEPS) | $(HARD_DIR)
	$(HARD_CLANG) $(HARD_CFLAGS) -O1 $(HARD_SAN_TSAN) $< $(HARD_TSAN_OBJS) -o $@ $(HARD_LDLIBS)
$(HARD_DIR)/mt_ubsan: tests/hardening/mt_sanitize.c $(HARD_UBSAN_OBJS) $(HARD_DEPS) | $(HARD_DIR)
	$(HARD_CLANG) $(HARD_CFLAGS) -O1 $(HARD_SAN_UBSAN) $< $(HARD_UBSAN_OBJS) -o $@ $(HARD_LDLIBS)
$(HARD_DIR)/mt_asan: tests/hardening/mt_sanitize.c $(HARD_ASAN_OBJS) $(HARD_DEPS) | $(HARD_DIR)
	$(HARD_CLANG) $(HARD_CFLAGS) -O1 $(HARD_SAN_ASAN) $< $(HARD_ASAN_OBJS) -o $@ $(HARD_LDLIBS)
$(HARD_DIR)/fuzz_alloc: tests/hardening/fuzz_alloc.c $(HARD_FUZZ_OBJS) $(HARD_DEPS) | $(HARD_DIR)
	$(HARD_CLANG) $(HARD_CFLAGS) -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    $< $(HARD_FUZZ_OBJS) -o $@ $(HARD_LDLIBS)

FUZZ_TIME ?= 300
FUZZ_JOBS ?= 1
fuzz: $(HARD_DIR)/fuzz_alloc | $(HARD_DIR)/fuzz-corpus $(HARD_DIR)/fuzz-artifacts
	ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 $(HARD_DIR)/fuzz_alloc \
	    -max_total_time=$(FUZZ_TIME) -max_len=4096 -rss_limit_mb=4096 -timeout=60 \
	    -print_final_stats=1 -artifact_prefix=$(HARD_DIR)/fuzz-artifacts/ \
	    $(HARD_DIR)/fuzz-corpus

SOAK_TIME ?= 600
SOAK_THREADS ?= 4
soak: $(HARD_DIR)/soak $(LIB_SO)
	LD_PRELOAD=$(abspath $(LIB_SO)) $(HARD_DIR)/soak $(SOAK_TIME) $(SOAK_THREADS)

sanitize: $(HARD_DIR)/mt_tsan $(HARD_DIR)/mt_ubsan $(HARD_DIR)/mt_asan
	TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 $(HARD_DIR)/mt_tsan core
	TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 $(HARD_DIR)/mt_tsan stats
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(HARD_DIR)/mt_ubsan core
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(HARD_DIR)/mt_ubsan stats
	$(HARD_DIR)/mt_asan core
	$(HARD_DIR)/mt_asan stats

STRESS_RUNS ?= 80
stress: $(HARD_DIR)/mt_ubsan
	tests/hardening/stress-loop.sh $(HARD_DIR)/mt_ubsan $(STRESS_RUNS)
