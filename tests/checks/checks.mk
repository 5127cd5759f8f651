# Secure-mode and introspection checks (tests/suite-checks.sh).
CHECKS_BIN := $(BUILD)/checks
CHECKS_SRCS := $(wildcard tests/checks/*.c)
CHECKS_PROGS := $(patsubst tests/checks/%.c,$(CHECKS_BIN)/%,$(CHECKS_SRCS))

.PHONY: checks-tests
checks-tests: $(CHECKS_PROGS)

$(CHECKS_BIN)/%: tests/checks/%.c include/tidemalloc.h | $(CHECKS_BIN)
	$(CC) -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -Iinclude $< -o $@ -ldl -lpthread

$(CHECKS_BIN):
	mkdir -p $@
