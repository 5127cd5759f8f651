# glibc 2.36's own malloc tests (and two of its malloc benchmarks), built at
# test time from Debian's glibc-source package as ordinary programs against
# the installed libc.  Nothing here depends on src/: the same binaries run
# under glibc, the peers and tidemalloc (tests/suite-glibc.sh,
# tests/glibc/compare.sh).
#
#   make glibc-tests       build/glibc/<test> for every test in tests.txt
#   make glibc-benchtests  build/glibc/bench-malloc-simple, bench-malloc-thread
#
# Included from the top Makefile, which defines BUILD and CC.

GLIBC_DIR     := tests/glibc
GLIBC_XDIR    := $(BUILD)/glibc-src
GLIBC_TREE    := $(GLIBC_XDIR)/glibc
GLIBC_STAMP   := $(GLIBC_XDIR)/.stamp
GLIBC_OUT     := $(BUILD)/glibc

# Test names are the lines of tests.txt that start with a letter.
GLIBC_TESTS    := $(shell awk '/^[a-z]/ {print $$1}' $(GLIBC_DIR)/tests.txt)
GLIBC_INTERNAL := $(shell awk '/^[a-z]/ && $$2 == "internal" {print $$1}' $(GLIBC_DIR)/tests.txt)

# The support/ files (glibc's test harness) these tests link; found from the
# link map of the whole list.  The harness is compiled as glibc compiles it,
# into a small archive, so only what a test uses ends up in it.
GLIBC_SUPPORT := check oom_error support_paths support_quote_blob \
  support_record_failure support_shared_allocate support_test_compare_blob \
  support_test_compare_failure support_test_main support_test_verify_impl \
  temp_file write_message xasprintf xcalloc xchdir xfclose xfopen xfork \
  xmalloc xmemstream xmmap xmunmap xopen xpthread_barrier_destroy \
  xpthread_barrier_init xpthread_barrier_wait xpthread_barrierattr_destroy \
  xpthread_barrierattr_init xpthread_barrierattr_setpshared \
  xpthread_check_return xpthread_create xpthread_join xpthread_kill xsignal \
  xstrdup xsysconf
# glibc-internal helpers that tests-internal call (GLIBC_PRIVATE in libc.so):
# compiled into those tests so that they run the same code on any libc build.
GLIBC_HELPERS := dynarray_at_failure dynarray_emplace_enlarge \
  dynarray_finalize dynarray_resize dynarray_resize_clear \
  scratch_buffer_dupfree scratch_buffer_grow scratch_buffer_grow_preserve \
  scratch_buffer_set_array_size

# glibc builds its tests with -std=gnu11 -fgnu89-inline -O2 and its own
# warning set; these are glibc's sources, not ours, so warnings are not
# errors here (our own shim headers are plain declarations).
# glibc-compat.h stands in for libc-symbols.h, which glibc force-includes.
GLIBC_CFLAGS := -std=gnu11 -fgnu89-inline -O2 -g -w -pthread \
  -D_FILE_OFFSET_BITS=64 -include $(GLIBC_DIR)/shim/glibc-compat.h \
  -I$(GLIBC_DIR)/shim -I$(GLIBC_XDIR)/inc -I$(GLIBC_TREE) -I$(GLIBC_TREE)/support
GLIBC_LDLIBS := -pthread -lrt

# support_paths.c wants the tree's locations at build time (glibc passes
# them the same way, from support/Makefile).
GLIBC_PATHS_FLAGS = -DSRCDIR_PATH=\"$(abspath $(GLIBC_TREE))\" \
  -DOBJDIR_PATH=\"$(abspath $(GLIBC_OUT))\" \
  -DOBJDIR_ELF_LDSO_PATH=\"/lib64/ld-linux-x86-64.so.2\" \
  -DINSTDIR_PATH=\"/usr\" -DLIBDIR_PATH=\"/usr/lib/x86_64-linux-gnu\" \
  -DBINDIR_PATH=\"/usr/bin\" -DSBINDIR_PATH=\"/usr/sbin\" \
  -DSLIBDIR_PATH=\"/lib/x86_64-linux-gnu\" -DROOTSBINDIR_PATH=\"/sbin\" \
  -DCOMPLOCALEDIR_PATH=\"/usr/lib/locale\"

GLIBC_SUPPORT_A := $(GLIBC_OUT)/obj/libsupport.a
GLIBC_HELPERS_A := $(GLIBC_OUT)/obj/libhelpers.a
GLIBC_BINS      := $(addprefix $(GLIBC_OUT)/,$(GLIBC_TESTS))
GLIBC_SHIMS     := $(wildcard $(GLIBC_DIR)/shim/*.h)

.PHONY: glibc-tests glibc-benchtests glibc-src
glibc-tests: $(GLIBC_BINS)
glibc-src: $(GLIBC_STAMP)

$(GLIBC_STAMP): $(GLIBC_DIR)/extract.sh
	bash $(GLIBC_DIR)/extract.sh $(GLIBC_XDIR)

# Sources appear only once the stamp exists, so objects depend on the stamp
# (the unpacked tree never changes under a given stamp).
$(GLIBC_OUT)/obj/support/%.o: $(GLIBC_STAMP) $(GLIBC_SHIMS)
	@mkdir -p $(@D)
	$(CC) $(GLIBC_CFLAGS) -DTIMEOUTFACTOR=1 \
	  $(if $(filter support_paths,$*),$(GLIBC_PATHS_FLAGS)) \
	  -c $(GLIBC_TREE)/support/$*.c -o $@

$(GLIBC_OUT)/obj/helpers/%.o: $(GLIBC_STAMP) $(GLIBC_SHIMS)
	@mkdir -p $(@D)
	$(CC) $(GLIBC_CFLAGS) -c $(GLIBC_TREE)/malloc/$*.c -o $@

$(GLIBC_SUPPORT_A): $(patsubst %,$(GLIBC_OUT)/obj/support/%.o,$(GLIBC_SUPPORT))
	rm -f $@ && ar rcs $@ $^

$(GLIBC_HELPERS_A): $(patsubst %,$(GLIBC_OUT)/obj/helpers/%.o,$(GLIBC_HELPERS))
	rm -f $@ && ar rcs $@ $^

# Tests in glibc's $(tests) get -DTEST_NO_MALLOPT (malloc/Makefile); its
# $(tests-internal) do not, and link the internal helpers.
$(GLIBC_BINS): $(GLIBC_OUT)/%: $(GLIBC_STAMP) $(GLIBC_SUPPORT_A) $(GLIBC_HELPERS_A) $(GLIBC_SHIMS) $(GLIBC_DIR)/tests.txt
	@mkdir -p $(@D)
	$(CC) $(GLIBC_CFLAGS) \
	  $(if $(filter $*,$(GLIBC_INTERNAL)),,-DTEST_NO_MALLOPT) \
	  $(GLIBC_TREE)/malloc/$*.c -o $@ \
	  $(if $(filter $*,$(GLIBC_INTERNAL)),$(GLIBC_HELPERS_A)) \
	  $(GLIBC_SUPPORT_A) $(GLIBC_LDLIBS)

# glibc's benchtests/bench-malloc-{simple,thread}.c, timed with
# clock_gettime (USE_CLOCK_GETTIME, as glibc's benchtests allow), built
# like glibc's "make bench-malloc" builds them.  Run them with
# tests/glibc/bench.sh (or by hand: bench-malloc-thread NTHREADS,
# bench-malloc-simple NALLOCS); they print JSON.
GLIBC_BENCH_CFLAGS := -std=gnu11 -fgnu89-inline -O2 -g -w -pthread \
  -DUSE_CLOCK_GETTIME -D_ISOMAC -include $(GLIBC_DIR)/shim/glibc-compat.h \
  -I$(GLIBC_DIR)/shim -I$(GLIBC_XDIR)/inc -I$(GLIBC_TREE) -I$(GLIBC_TREE)/benchtests
GLIBC_BENCHES := $(GLIBC_OUT)/bench-malloc-simple $(GLIBC_OUT)/bench-malloc-thread

glibc-benchtests: $(GLIBC_BENCHES)

$(GLIBC_BENCHES): $(GLIBC_OUT)/bench-%: $(GLIBC_STAMP) $(GLIBC_SHIMS)
	@mkdir -p $(@D)
	$(CC) $(GLIBC_BENCH_CFLAGS) $(GLIBC_TREE)/benchtests/bench-$*.c \
	  $(GLIBC_TREE)/benchtests/json-lib.c -o $@ -pthread -lm
