# Own behaviour tests (tests/test_*.c, tests/test_*.cc): `make unit-tests`
# builds them into $(BUILD)/tests/. They are run by tests/suite-unit.sh with the
# library in LD_PRELOAD, so they are not linked against it.
UNIT_CFLAGS   := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fno-builtin \
                 -Iinclude -Itests $(EXTRA_UNIT_CFLAGS)
UNIT_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Werror -fno-builtin \
                 -Iinclude -Itests $(EXTRA_UNIT_CFLAGS)
UNIT_LDLIBS   := -lpthread -ldl

UNIT_C_SRCS  := $(wildcard tests/test_*.c)
UNIT_CC_SRCS := $(wildcard tests/test_*.cc)
UNIT_BINS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(UNIT_C_SRCS)) \
                $(patsubst tests/%.cc,$(BUILD)/tests/%,$(UNIT_CC_SRCS))
# A library that test_dlopen loads at run time.
UNIT_HELPERS := $(BUILD)/tests/libdlalloc.so

.PHONY: unit-tests
unit-tests: $(UNIT_BINS) $(UNIT_HELPERS)

$(BUILD)/tests:
	mkdir -p $@

$(BUILD)/tests/test_%: tests/test_%.c tests/common.h tests/child_stderr.h include/tidemalloc.h $(wildcard src/*.h) src/size_class.c | $(BUILD)/tests
	$(CC) $(UNIT_CFLAGS) $< -o $@ $(UNIT_LDLIBS)

$(BUILD)/tests/test_%: tests/test_%.cc tests/common.h include/tidemalloc.h | $(BUILD)/tests
	$(CXX) $(UNIT_CXXFLAGS) $< -o $@ $(UNIT_LDLIBS)

$(BUILD)/tests/libdlalloc.so: tests/helper_dlalloc.c | $(BUILD)/tests
	$(CC) $(UNIT_CFLAGS) -fPIC -shared $< -o $@
