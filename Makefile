# SPDX-License-Identifier: MIT
# Kbuild-style build of kt: libkt.so, libkt.a, the kt command, the selftests.
#   make [V=1] [O=dir] [W=1] [SAN=address|thread|undefined] [target]
# Per-ISA sources are named *-avx2.c, *-avxvnni.c, *-avx512bw.c,
# *-avx512vnni.c, *-avx512.c, *-amx.c and get their -m flags from the name;
# CFLAGS_<file>.o adds flags to one object.

VERSION := 0.1.0
SONAME := libkt.so.0

comma := ,
ifeq ($(SAN),)
O ?= build
else
O ?= build/san-$(subst $(comma),-,$(SAN))
endif
obj := $(O)

ifeq ($(V),1)
Q :=
quiet = @:
else
Q := @
quiet = @printf '  %-7s %s\n'
endif

CC ?= cc
AR ?= ar
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wpointer-arith -Wvla -Wformat=2 -Wundef -Wno-unused-parameter
ifneq ($(W),)
WARN += -Wcast-align -Wconversion -Wno-sign-conversion
endif
ifneq ($(WERROR),0)
WARN += -Werror
endif

OPT ?= -O2 -g
BASE_CFLAGS := -std=gnu11 $(OPT) -fPIC -fvisibility=hidden -pthread \
	-D_GNU_SOURCE -Iinclude -I. $(WARN)
ifneq ($(SAN),)
BASE_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer
SAN_LDFLAGS := -fsanitize=$(SAN)
endif
ifeq ($(SAN),thread)
# TSan does not model fences; the fences pair with seq_cst atomics anyway
BASE_CFLAGS += -Wno-tsan
endif
KT_CFLAGS := $(BASE_CFLAGS) $(CFLAGS)
LIBS := -luring -lnuma -ljansson -ldl -lpthread -lm
KT_LDFLAGS := $(SAN_LDFLAGS) $(LDFLAGS)

# ISA flags chosen by file name; nothing ISA-specific is global.
ISA_avx2 := -mavx2 -mfma -mf16c
ISA_avxvnni := $(ISA_avx2) -mavxvnni
ISA_avx512bw := $(ISA_avx2) -mavx512f -mavx512bw -mavx512vl -mavx512dq
ISA_avx512vnni := $(ISA_avx512bw) -mavx512vnni
ISA_avx512 := $(ISA_avx512vnni) -mavx512bf16
ISA_amx := $(ISA_avx512) -mamx-tile -mamx-int8 -mamx-bf16
isa_of = $(foreach i,amx avx512 avx512vnni avx512bw avxvnni avx2,$(if $(filter %-$(i),$(basename $(notdir $(1)))),$(ISA_$(i))))

LIB_SRCS := $(sort $(wildcard ktcore/*.c kernels/*.c loader/*.c uring/*.c gpu/*.c))
TOOL_SRCS := $(sort $(wildcard tools/*.c))
TEST_SRCS := $(sort $(wildcard selftests/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(obj)/%.o)
TOOL_OBJS := $(TOOL_SRCS:%.c=$(obj)/%.o)
TEST_BINS := $(TEST_SRCS:%.c=$(obj)/%)

LIBKT_SO := $(obj)/libkt.so
LIBKT_A := $(obj)/libkt.a
KT_BIN := $(obj)/kt

.DELETE_ON_ERROR:
.SECONDARY:
.SUFFIXES:
.PHONY: all clean check check-all selftests install check-abi asan tsan FORCE

all: $(LIBKT_SO) $(LIBKT_A) $(KT_BIN) $(obj)/kt.pc

# Each object depends on a file holding its command line, rewritten only
# when the flags change, so a flag change rebuilds what it affects.
flags_of = $(KT_CFLAGS) $(call isa_of,$(1)) $(CFLAGS_$(notdir $(1:.c=.o)))

$(obj)/%.flags: FORCE
	@mkdir -p $(@D)
	@echo '$(call flags_of,$*.c)' | cmp -s - $@ || \
		echo '$(call flags_of,$*.c)' > $@

$(obj)/%.o: %.c $(obj)/%.flags
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(call flags_of,$<) -MMD -MP -c -o $@ $<

$(LIBKT_SO): $(LIB_OBJS) libkt.map
	$(quiet) LD $@
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=libkt.map \
		-Wl,-z,defs $(KT_LDFLAGS) -o $@ $(LIB_OBJS) $(LIBS)

$(LIBKT_A): $(LIB_OBJS)
	$(quiet) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $(LIB_OBJS)

$(KT_BIN): $(TOOL_OBJS) $(LIBKT_A)
	$(quiet) LD $@
	$(Q)$(CC) $(KT_LDFLAGS) -pthread -o $@ $(TOOL_OBJS) $(LIBKT_A) $(LIBS)

$(obj)/selftests/%: selftests/%.c $(LIBKT_A) selftests/kt_test.h $(obj)/selftests/%.flags
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(call flags_of,$<) -Iselftests -MMD -MP -MF $@.d -o $@ $< \
		$(LIBKT_A) $(KT_LDFLAGS) $(LIBS)

# kt.pc names the install paths: regenerate it when they change.
PC_VARS := $(PREFIX) $(LIBDIR) $(INCDIR) $(VERSION)
$(obj)/kt.pc.vars: FORCE
	@mkdir -p $(@D)
	@echo '$(PC_VARS)' | cmp -s - $@ || echo '$(PC_VARS)' > $@

$(obj)/kt.pc: Makefile $(obj)/kt.pc.vars
	@mkdir -p $(@D)
	$(quiet) GEN $@
	$(Q)printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' \
		'includedir=$(INCDIR)' '' 'Name: kt' \
		'Description: MoE routed-expert runtime' 'Version: $(VERSION)' \
		'Libs: -L$${libdir} -lkt' \
		'Libs.private: $(LIBS)' 'Cflags: -I$${includedir}' > $@

selftests: $(TEST_BINS) $(KT_BIN)

check: selftests
	$(Q)scripts/run-selftests.sh --kt $(KT_BIN) $(TEST_BINS)

# What CI runs: the ABI check, then the selftests plain and under
# ASan+UBSan, with one summary line at the end.
CHECK_SAN := address,undefined
SAN_O := build/san-$(subst $(comma),-,$(CHECK_SAN))
check-all: selftests check-abi
	$(Q)$(MAKE) --no-print-directory SAN=$(CHECK_SAN) selftests
	$(Q)scripts/run-selftests.sh --kt $(KT_BIN) $(TEST_BINS) \
		--kt $(SAN_O)/kt $(TEST_BINS:$(obj)/%=$(SAN_O)/%)

check-abi: $(LIBKT_SO)
	$(Q)scripts/check-abi.sh $(LIBKT_SO)

asan:
	$(Q)$(MAKE) SAN=address check
tsan:
	$(Q)$(MAKE) SAN=thread check

install: all
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)/kt \
		$(DESTDIR)$(BINDIR)
	install -m 644 include/kt/*.h $(DESTDIR)$(INCDIR)/kt/
	install -m 755 $(LIBKT_SO) $(DESTDIR)$(LIBDIR)/libkt.so.$(VERSION)
	ln -sf libkt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkt.so
	install -m 644 $(LIBKT_A) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(obj)/kt.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 755 $(KT_BIN) $(DESTDIR)$(BINDIR)/

clean:
	rm -rf $(O)

-include $(LIB_OBJS:.o=.d) $(TOOL_OBJS:.o=.d) $(TEST_BINS:=.d)
