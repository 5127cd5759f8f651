# tools/tools.mk: the tidemalloc(1) command, man pages, pkg-config file and
# `make install` / `make uninstall`. Included by the top Makefile, which
# defines BUILD, LIB_SO, LIB_A, VERSION, SONAME and CC.
#
#   make tools                              builds $(BUILD)/tidemalloc
#   make install   [PREFIX=/usr/local] [DESTDIR=]
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]
#   make man-check                          renders both man pages, fails on warnings

PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL ?= install

# Installed layout. The command finds the library as ../lib/$(SONAME) from
# its own directory, so bin and lib stay siblings under PREFIX.
TM_BINDIR     := $(PREFIX)/bin
TM_LIBDIR     := $(PREFIX)/lib
TM_INCDIR     := $(PREFIX)/include
TM_PCDIR      := $(TM_LIBDIR)/pkgconfig
TM_MAN1DIR    := $(PREFIX)/share/man/man1
TM_MAN3DIR    := $(PREFIX)/share/man/man3
TM_SO_REAL    := libtidemalloc.so.$(VERSION)

TOOL_BIN    := $(BUILD)/tidemalloc
TOOL_PC     := $(BUILD)/tidemalloc.pc
TOOL_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror -Iinclude

# Every file install creates, relative to $(DESTDIR); uninstall removes these.
TM_INSTALLED := \
	$(TM_LIBDIR)/$(TM_SO_REAL) \
	$(TM_LIBDIR)/$(SONAME) \
	$(TM_LIBDIR)/libtidemalloc.so \
	$(TM_LIBDIR)/libtidemalloc.a \
	$(TM_INCDIR)/tidemalloc.h \
	$(TM_PCDIR)/tidemalloc.pc \
	$(TM_BINDIR)/tidemalloc \
	$(TM_MAN1DIR)/tidemalloc.1 \
	$(TM_MAN3DIR)/tidemalloc.3

.PHONY: tools install uninstall man-check
all: tools
tools: $(TOOL_BIN)

$(TOOL_BIN): tools/tidemalloc.c include/tidemalloc.h
	@mkdir -p $(BUILD)
	$(CC) $(TOOL_CFLAGS) $< -o $@

# Regenerated on every install: it records PREFIX.
.PHONY: $(TOOL_PC)
$(TOOL_PC): tools/tidemalloc.pc.in
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

install: lib tools $(TOOL_PC)
	$(INSTALL) -d '$(DESTDIR)$(TM_BINDIR)' '$(DESTDIR)$(TM_LIBDIR)' '$(DESTDIR)$(TM_PCDIR)' \
		'$(DESTDIR)$(TM_INCDIR)' '$(DESTDIR)$(TM_MAN1DIR)' '$(DESTDIR)$(TM_MAN3DIR)'
	$(INSTALL) -m 755 '$(BUILD)/$(TM_SO_REAL)' '$(DESTDIR)$(TM_LIBDIR)/$(TM_SO_REAL)'
	ln -sf '$(TM_SO_REAL)' '$(DESTDIR)$(TM_LIBDIR)/$(SONAME)'
	ln -sf '$(SONAME)' '$(DESTDIR)$(TM_LIBDIR)/libtidemalloc.so'
	$(INSTALL) -m 644 '$(LIB_A)' '$(DESTDIR)$(TM_LIBDIR)/libtidemalloc.a'
	$(INSTALL) -m 644 include/tidemalloc.h '$(DESTDIR)$(TM_INCDIR)/tidemalloc.h'
	$(INSTALL) -m 644 '$(TOOL_PC)' '$(DESTDIR)$(TM_PCDIR)/tidemalloc.pc'
	$(INSTALL) -m 755 '$(TOOL_BIN)' '$(DESTDIR)$(TM_BINDIR)/tidemalloc'
	$(INSTALL) -m 644 tools/tidemalloc.1 '$(DESTDIR)$(TM_MAN1DIR)/tidemalloc.1'
	$(INSTALL) -m 644 tools/tidemalloc.3 '$(DESTDIR)$(TM_MAN3DIR)/tidemalloc.3'

uninstall:
	rm -f $(foreach f,$(TM_INSTALLED),'$(DESTDIR)$(f)')

man-check:
	@for m in tools/tidemalloc.1 tools/tidemalloc.3; do \
	  out=$$(groff -man -ww -z -Tutf8 $$m 2>&1); \
	  if [ -n "$$out" ]; then echo "$$m:"; echo "$$out"; exit 1; fi; \
	done; echo "man pages render cleanly"
