# Own behaviour tests (tests/test_*.c, tests/test_*.cc): `make unit-tests`
# builds them into $(BUILD)/tests/. They are run by tests/suite-unit.sh with the
# library in LD_PRELOAD, so they are not linked against it.
TEST_CFLAGS   := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fno-builtin \
                 -Iinclude -Itests $(EXTRA_TEST_CFLAGS)
TEST_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Werror -fno-builtin \
                 -Iinclude -Itests $(EXTRA_TEST_CFLAGS)
TEST_LDLIBS   := -lpthread -ldl
CXX ?= g++

TEST_C_SRCS  := $(wildcard tests/test_*.c)
TEST_CC_SRCS := $(wildcard tests/test_*.cc)
TEST_BINS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_C_SRCS)) \
                $(patsubst tests/%.cc,$(BUILD)/tests/%,$(TEST_CC_SRCS))
# A library that test_dlopen loads at run time.
TEST_HELPERS := $(BUILD)/tests/libdlalloc.so

.PHONY: unit-tests
unit-tests: $(TEST_BINS) $(TEST_HELPERS)

$(BUILD)/tests:
	mkdir -p $@

$(BUILD)/tests/test_%: tests/test_%.c tests/common.h include/tidemalloc.h | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) $< -o $@ $(TEST_LDLIBS)

$(BUILD)/tests/test_%: tests/test_%.cc tests/common.h include/tidemalloc.h | $(BUILD)/tests
	$(CXX) $(TEST_CXXFLAGS) $< -o $@ $(TEST_LDLIBS)

$(BUILD)/tests/libdlalloc.so: tests/helper_dlalloc.c | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -fPIC -shared $< -o $@
