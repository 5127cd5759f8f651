# Benchmarks (bench/). Included by the top Makefile, which defines CC, BUILD,
# LIB_SO and the `lib` target. The runner is bench/run.py (Python 3 stdlib):
# harness.py runs and measures, suite.py is `make bench`, fast_path.py the
# instruction and check-cost figures, cache_sim.py the simulated cache misses,
# release.py ebizzy and ghostscript, latency.py single calls' latency,
# scaling.py the thread-scaling table (for a machine with many CPUs).
BENCH_DIR    := $(BUILD)/bench
BENCH_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -pthread
BENCH_PROGS  := launch churn prodcons larson falseshare mstress large threadchurn threadwave pair ebizzy arena_pairs patterns faultcost hostprobe page_model lent_loop latency
BENCH_BINS   := $(addprefix $(BENCH_DIR)/,$(BENCH_PROGS))
BENCH_PY     ?= /usr/bin/python3
# Extra arguments for the runner, e.g. BENCH_ARGS="--reps 3 --only larson,churn"
BENCH_ARGS   ?=

.PHONY: bench bench-quick bench-insns bench-checks bench-cache bench-ebizzy bench-gs bench-latency bench-scaling bench-build

bench-build: $(BENCH_BINS) $(BENCH_DIR)/rss_parts.so $(BENCH_DIR)/live_bound.so

$(BENCH_DIR)/%: bench/%.c bench/common.h | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) $< -o $@

$(BENCH_DIR):
	mkdir -p $@

bench: lib bench-build
	$(BENCH_PY) bench/run.py bench $(BENCH_ARGS)

bench-quick: lib bench-build
	$(BENCH_PY) bench/run.py quick $(BENCH_ARGS)

bench-insns: lib bench-build
	$(BENCH_PY) bench/run.py insns $(BENCH_ARGS)

bench-checks: lib lib-nochecks bench-build
	$(BENCH_PY) bench/run.py checks $(BENCH_ARGS)

bench-cache: lib bench-build
	$(BENCH_PY) bench/run.py cache $(BENCH_ARGS)

bench-ebizzy: lib bench-build
	$(BENCH_PY) bench/run.py ebizzy $(BENCH_ARGS)

bench-gs: lib bench-build
	$(BENCH_PY) bench/run.py gs $(BENCH_ARGS)

bench-latency: lib bench-build
	$(BENCH_PY) bench/run.py latency $(BENCH_ARGS)

bench-scaling: lib bench-build
	$(BENCH_PY) bench/run.py scaling $(BENCH_ARGS)

# rss_parts.so: where resident memory sits, by part (a diagnostic; see its header)
$(BENCH_DIR)/rss_parts.so: bench/rss_parts.c bench/next_alloc.h src/size_class.c src/types.h src/lock.h | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -fPIC -shared -Iinclude -Isrc bench/rss_parts.c src/size_class.c -o $@ -ldl

# live_bound.so: the program's live bytes against what pools per thread and
# per class must hold (a diagnostic; see its header)
$(BENCH_DIR)/live_bound.so: bench/live_bound.c bench/next_alloc.h src/size_class.c src/internal.h src/types.h src/lock.h | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -fPIC -shared -Iinclude -Isrc bench/live_bound.c src/size_class.c -o $@ -ldl
