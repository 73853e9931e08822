# SPDX-License-Identifier: MIT
# Kbuild-style build of kt: libkt.so, libkt.a, the kt command, the selftests.
#   make [V=1] [O=dir] [W=1] [SAN=address|thread|undefined] [DEBUG=1] [target]
# Each folder's Kbuild lists its objects (obj-y: libkt or the kt command;
# obj-test: linked into the selftests only). Per-ISA sources are named
# *-avx2.c, *-avxvnni.c, *-avx512bw.c, *-avx512vnni.c, *-avx512.c, *-amx.c
# and get their -m flags from the name; CFLAGS_<file>.o adds flags to one
# object.

# The version is written once, in include/kt/version.h.
VERSION := $(shell sed -n 's/^.define KT_VERSION_[A-Z]* *\([0-9][0-9]*\)$$/\1/p' \
	include/kt/version.h | paste -sd. -)
SONAME := libkt.so.$(firstword $(subst ., ,$(VERSION)))

comma := ,
ifneq ($(DEBUG),)
O ?= build/debug
else ifeq ($(SAN),)
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
CXX ?= g++
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

ifneq ($(DEBUG),)
# the misuse checks need no speed: -O0 builds the kernels 5x faster
OPT ?= -O0 -g
endif
OPT ?= -O2 -g
BASE_CFLAGS := -std=gnu11 $(OPT) -fPIC -fvisibility=hidden -pthread \
	-D_GNU_SOURCE -I include -iquote . $(WARN)
ifneq ($(SAN),)
BASE_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer
SAN_LDFLAGS := -fsanitize=$(SAN)
endif
ifneq ($(DEBUG),)
# misuse checks that abort with a message (Documentation/debugging.md)
BASE_CFLAGS += -DKT_DEBUG
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
ISA_avx512 := $(ISA_avx512vnni) -mavx512bf16 -mavx512vbmi
ISA_amx := $(ISA_avx512) -mamx-tile -mamx-int8 -mamx-bf16
isa_of = $(foreach i,amx avx512 avx512vnni avx512bw avxvnni avx2,$(if $(filter %-$(i),$(basename $(notdir $(1)))),$(ISA_$(i))))
# UBSan in the SIMD bodies: their null and object-size checks (ASan traps
# the same accesses), alignment (x86 loads need none) and pointer-overflow
# made them 4x slower to build (moe-avx512.c: 358 -> 87 s of CPU under
# ASan+UBSan); signed overflow, shifts, bounds and the rest stay.
UBSAN_SIMD_OFF := -fno-sanitize=null$(comma)object-size$(comma)alignment$(comma)pointer-overflow
san_of = $(if $(and $(filter undefined,$(subst $(comma), ,$(SAN))),$(call isa_of,$(1))),$(UBSAN_SIMD_OFF))

# The floors, lowest first (Documentation/layers.md).
LIB_DIRS := kernels uring gpu ktcore loader

# $(call kbuild,dir): read dir/Kbuild; its obj-y and obj-test with paths.
define kbuild
obj-y :=
obj-test :=
include $(1)/Kbuild
$(1)-objs := $$(addprefix $(obj)/$(1)/,$$(obj-y))
$(1)-test-objs := $$(addprefix $(obj)/$(1)/,$$(obj-test))
endef
$(foreach d,$(LIB_DIRS) tools,$(eval $(call kbuild,$(d))))

# Builds that do not check the kernels link the plain build's (build/):
# SAN=thread looks for races in the runtime's threading (ktcore, uring,
# loader, cache), and the kernels are single-threaded compute on rows each
# worker owns, 20x slower and 3x longer to build under TSan; DEBUG=1's
# misuse checks are not in them. crc32c.o, whose lazily built tables
# threads share, is always built in the tree. PLAIN_KERNELS=0 builds them
# all in the tree (Documentation/debugging.md).
PLAIN_KERNELS ?= $(if $(filter thread,$(SAN)),1,$(if $(DEBUG),$(if $(SAN),,1)))
ifeq ($(PLAIN_KERNELS)$(filter-out build,$(obj)),1$(obj))
plain_kern = $(patsubst $(obj)/%,build/%,$(filter-out %/crc32c.o,$(1))) \
	$(filter %/crc32c.o,$(1))
kernels-objs := $(call plain_kern,$(kernels-objs))
kernels-test-objs := $(call plain_kern,$(kernels-test-objs))
KERN_PLAIN := $(filter build/kernels/%,$(kernels-objs) $(kernels-test-objs))
endif

LIB_OBJS := $(foreach d,$(LIB_DIRS),$($(d)-objs))
TEST_OBJS := $(foreach d,$(LIB_DIRS),$($(d)-test-objs))
TOOL_OBJS := $(tools-objs)
TEST_SRCS := $(sort $(wildcard selftests/*/*.c))
# C++ selftests: the public headers must compile as C++17 without warnings
TEST_CXX_SRCS := $(sort $(wildcard selftests/*/*.cc))
TEST_BINS := $(TEST_SRCS:%.c=$(obj)/%) $(TEST_CXX_SRCS:%.cc=$(obj)/%)
LIBKT_TEST := $(obj)/libkt-test.a
# Programs of scripts/ built against libkt.a with the library's flags.
SCRIPT_BINS := $(obj)/scripts/simd-bench $(obj)/scripts/amx-cross \
	$(obj)/scripts/amx-loops $(obj)/scripts/ggml-bench $(obj)/scripts/vnni-mix

LIBKT_SO := $(obj)/libkt.so
LIBKT_A := $(obj)/libkt.a
KT_BIN := $(obj)/kt

.DELETE_ON_ERROR:
.SECONDARY:
.SUFFIXES:
.PHONY: all clean check check-all selftests install check-abi check-layers \
	debug-check valgrind \
	asan tsan FORCE

all: $(LIBKT_SO) $(LIBKT_A) $(KT_BIN) $(obj)/kt.pc $(SCRIPT_BINS)

# Each object depends on a file holding its command line, rewritten only
# when the flags change, so a flag change rebuilds what it affects.
flags_of = $(KT_CFLAGS) $(call isa_of,$(1)) $(call san_of,$(1)) \
	$(CFLAGS_$(notdir $(1:.c=.o)))

$(obj)/%.flags: FORCE
	@mkdir -p $(@D)
	@echo '$(call flags_of,$*.c)' | cmp -s - $@ || \
		echo '$(call flags_of,$*.c)' > $@

$(obj)/%.o: %.c $(obj)/%.flags
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(call flags_of,$<) -MMD -MP -c -o $@ $<

# Device kernels (Documentation/gpu.md): nvcc, where found, builds
# gpu/ffn.cu into one fatbin (SASS for each GPU_ARCHS entry, PTX for the
# last, which newer GPUs JIT) that gpu/fatbin.c embeds with .incbin.
# NVCC= (empty) builds without: the GPU path then answers -EOPNOTSUPP.
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) \
	$(wildcard /usr/local/cuda/bin/nvcc))
GPU_ARCHS ?= 80 86 89 90
NVCC_FLAGS := -O3 -std=c++17 -I . $(foreach a,$(GPU_ARCHS),-gencode \
	arch=compute_$(a),code=sm_$(a)) -gencode \
	arch=compute_$(lastword $(GPU_ARCHS)),code=compute_$(lastword $(GPU_ARCHS)) \
	$(NVCCFLAGS)
# one fatbin for every build of the tree (no C flag reaches it)
GPU_FATBIN := build/gpu/ffn.fatbin
ifneq ($(NVCC),)
CFLAGS_fatbin.o += -DKT_FATBIN='"$(GPU_FATBIN)"'
$(obj)/gpu/fatbin.o: $(GPU_FATBIN)
endif

build/gpu/ffn.nvflags: FORCE
	@mkdir -p $(@D)
	@echo '$(NVCC_FLAGS)' | cmp -s - $@ || \
		echo '$(NVCC_FLAGS)' > $@

$(GPU_FATBIN): gpu/ffn.cu gpu/ffn-abi.h gpu/layout.h build/gpu/ffn.nvflags
	@mkdir -p $(@D)
	$(quiet) NVCC $@
	$(Q)$(NVCC) $(NVCC_FLAGS) -fatbin -o $@ $<

# the plain build's kernels, for SAN=thread (above): made by a plain make
ifneq ($(KERN_PLAIN),)
$(KERN_PLAIN): plain-kernels ;
.PHONY: plain-kernels
plain-kernels:
	$(Q)$(MAKE) --no-print-directory SAN= DEBUG= PLAIN_KERNELS= O=build \
		$(KERN_PLAIN)
endif

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

$(LIBKT_TEST): $(TEST_OBJS)
	@mkdir -p $(@D)
	$(quiet) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $(TEST_OBJS)

$(obj)/selftests/%: selftests/%.c $(LIBKT_TEST) $(LIBKT_A) selftests/kt_test.h $(obj)/selftests/%.flags
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(call flags_of,$<) -iquote selftests -MMD -MP -MF $@.d \
		-o $@ $< $(LIBKT_TEST) $(LIBKT_A) $(KT_LDFLAGS) $(LIBS)

# they share the kt tool's option parsing (tools/opts.c)
$(obj)/scripts/%: scripts/%.c $(LIBKT_A) $(obj)/tools/opts.o $(obj)/scripts/%.flags
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(call flags_of,$<) -MMD -MP -MF $@.d -o $@ $< \
		$(obj)/tools/opts.o $(LIBKT_A) $(KT_LDFLAGS) $(LIBS)

TEST_CXXFLAGS := -std=c++17 -Wall -Wextra -Werror $(OPT) -pthread -I include \
	$(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer) \
	$(if $(filter thread,$(SAN)),-Wno-tsan)

$(obj)/selftests/%: selftests/%.cc $(LIBKT_A) $(obj)/selftests/%.cxxflags
	@mkdir -p $(@D)
	$(quiet) CXX $@
	$(Q)$(CXX) $(TEST_CXXFLAGS) -MMD -MP -MF $@.d -o $@ $< \
		$(LIBKT_A) $(KT_LDFLAGS) $(LIBS)

$(obj)/%.cxxflags: FORCE
	@mkdir -p $(@D)
	@echo '$(TEST_CXXFLAGS)' | cmp -s - $@ || echo '$(TEST_CXXFLAGS)' > $@

# The warp emulator compiles gpu/ffn.cu as C++ (selftests/gpu/cuda-emu.h).
# CUDA code reads shared bf16 pairs as words: no strict aliasing.
$(obj)/selftests/gpu/ffn-emu: TEST_CXXFLAGS += -I . -fno-strict-aliasing \
	-Wno-unknown-pragmas -Wno-unused-parameter
$(obj)/selftests/gpu/ffn-emu: gpu/ffn.cu selftests/gpu/cuda-emu.h

# The gpu selftests load a stand-in libcuda (selftests/gpu/stub/), and
# one that lacks an entry point, as an old driver would.
GPU_STUBS := $(obj)/selftests/gpu/libcuda-stub.so \
	$(obj)/selftests/gpu/libcuda-stub-old.so
$(filter $(obj)/selftests/gpu/%,$(TEST_BINS)): $(GPU_STUBS)
$(obj)/selftests/place/hostless: $(GPU_STUBS)
$(obj)/selftests/gpu/libcuda-stub.so: selftests/gpu/stub/cuda-stub.c gpu/cu.h \
		gpu/ffn-abi.h gpu/layout.h
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(KT_CFLAGS) -Wno-missing-prototypes -shared -Wl,-z,defs \
		-o $@ $< $(KT_LDFLAGS) -lm
$(obj)/selftests/gpu/libcuda-stub-old.so: selftests/gpu/stub/cuda-stub.c \
		gpu/cu.h gpu/ffn-abi.h gpu/layout.h
	@mkdir -p $(@D)
	$(quiet) CC $@
	$(Q)$(CC) $(KT_CFLAGS) -Wno-missing-prototypes -DSTUB_OLD -shared -Wl,-z,defs -o $@ $< \
		$(KT_LDFLAGS) -lm

# The ABI selftest dlopens the shared library it was built with.
$(obj)/selftests/abi/ffi: $(LIBKT_SO)

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

check: selftests check-layers check-abi
	$(Q)scripts/run-selftests.sh --kt $(KT_BIN) $(TEST_BINS)

check-layers:
	$(Q)scripts/check-layers.sh

# What CI runs: the ABI and layer checks, the fuzzers (fuzz-run, below),
# then the selftests plain, in the KT_DEBUG build, under ASan+UBSan and
# under TSan, with one summary line at the end. Each pass's tests start
# once its build is done and the pass before has run (no two passes share
# the machine's hugepages), while the next builds go on beside them: the
# log of each is printed whole at the end (CI_LOGS).
san_o = build/san-$(subst $(comma),-,$(1))
# TSan looks for races: the suites that call kernels and parsers on one
# thread (and take 20x their time under it) are left to the other passes.
# So is the warp emulator, whose coroutines switch stacks under TSan's feet.
SAN_SKIP_thread := $(obj)/selftests/kernels/% $(obj)/selftests/fuzz/% \
	$(obj)/selftests/simd/variants $(obj)/selftests/simd/amx_emu \
	$(obj)/selftests/simd/vexp $(obj)/selftests/gpu/ffn-emu
# The KT_DEBUG build (DEBUG=1) runs the misuse tests, which expect aborts.
DEBUG_TESTS := build/debug/selftests/moe/misuse
CI_LOGS := build/ci
CI_SAN_asan := address,undefined
CI_SAN_tsan := thread
# The ASan+UBSan pass is make fault-check's build (below): the same
# sanitizers with the fault hooks compiled in, idle unless a test arms
# them, so that selftests/loader/fault walks every site in CI.
CI_O_asan = $(FAULT_O)
CI_O_tsan = $(call san_o,thread)
CI_MAKE_asan = $(FAULT_MAKE)
CI_MAKE_tsan = $(MAKE) --no-print-directory SAN=thread
# a pass's test binaries and kt command, in its own tree
ci_bins = $(patsubst $(obj)/%,$(CI_O_$(1))/%, \
	$(filter-out $(SAN_SKIP_$(CI_SAN_$(1))),$(TEST_BINS)))
ci_kt = $(CI_O_$(1))/kt
.PHONY: ci-build-asan ci-build-tsan ci-build-debug ci-run-plain \
	ci-run-debug ci-run-asan ci-run-tsan
ci-build-asan ci-build-tsan: ci-build-%:
	+$(Q)$(CI_MAKE_$*) $(call ci_kt,$*) $(call ci_bins,$*)
# TSan and DEBUG=1 link the plain build's kernels: built first, here; and
# every tree embeds the one fatbin, made here before the sub-makes start
ci-build-tsan ci-build-debug: $(LIBKT_A) $(LIBKT_TEST)
# the plain build first, with both cores: its tests then run beside the
# ASan+UBSan build, the longest
ci-build-asan: | selftests
ci-build-asan ci-build-tsan ci-build-debug: $(if $(NVCC),$(GPU_FATBIN))
ci-build-debug:
	$(Q)$(MAKE) --no-print-directory DEBUG=1 $(DEBUG_TESTS)
# run-selftests.sh fails a failed pass; the summary below says so
ci-run-plain: selftests
	@mkdir -p $(CI_LOGS)
	$(Q)scripts/run-selftests.sh --kt $(KT_BIN) $(TEST_BINS) \
		>$(CI_LOGS)/plain.log 2>&1 || true
ci-run-debug: ci-build-debug | ci-run-plain
	$(Q)scripts/run-selftests.sh $(DEBUG_TESTS) >$(CI_LOGS)/debug.log 2>&1 || true
ci-run-asan ci-run-tsan: ci-run-%: ci-build-%
	$(Q)scripts/run-selftests.sh --scale 3 --kt $(call ci_kt,$*) \
		$(call ci_bins,$*) >$(CI_LOGS)/$*.log 2>&1 || true
ci-run-asan: | ci-run-debug
ci-run-tsan: | ci-run-asan
# the order of the prerequisites is the order make starts them in
check-all: check-abi check-layers selftests ci-build-asan ci-run-plain \
		ci-build-debug ci-build-tsan ci-run-debug ci-run-asan ci-run-tsan
	$(Q)scripts/selftest-logs.sh $(foreach p,plain debug asan tsan,$(CI_LOGS)/$(p).log)

# valgrind memcheck on the suites of the runtime's own logic (not the
# kernels': valgrind decodes neither AVX-512 nor AMX, and is 50x slower)
VALGRIND_TESTS := $(addprefix $(obj)/selftests/,core/opts core/ring core/mem \
	moe/misuse loader/open loader/hfconfig loader/safetensors \
	loader/regress uring/reader tools/units)
valgrind: $(VALGRIND_TESTS)
	$(Q)scripts/valgrind-check.sh $(VALGRIND_TESTS)

debug-check:
	$(Q)$(MAKE) --no-print-directory DEBUG=1 $(DEBUG_TESTS)
	$(Q)scripts/run-selftests.sh $(DEBUG_TESTS)

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

# Python selftests and man pages.
# The Python launcher loads this build's libkt.so. Man pages are generated
# from the headers' kernel-doc and the command's --help (gen-man.sh), and
# `make check` proves every exported kt_* symbol has one.
MAN_DIR := $(obj)/man
MANDIR ?= $(PREFIX)/share/man
.PHONY: man check-man install-man

$(obj)/selftests/python/python: $(LIBKT_SO)

man: $(MAN_DIR)/man1/kt.1

$(MAN_DIR)/man1/kt.1: scripts/gen-man.sh $(wildcard include/kt/*.h) $(KT_BIN)
	$(quiet) GEN $(MAN_DIR)
	$(Q)scripts/gen-man.sh -o $(MAN_DIR) -k $(KT_BIN) -v $(VERSION) \
		include/kt/*.h >/dev/null

check-man: man $(LIBKT_SO)
	$(Q)scripts/gen-man.sh --check $(LIBKT_SO) $(MAN_DIR)

check: check-man
install: install-man

install-man: man
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3
	install -m 644 $(MAN_DIR)/man1/kt.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(MAN_DIR)/man3/*.3 $(DESTDIR)$(MANDIR)/man3/

-include $(LIB_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(TOOL_OBJS:.o=.d) \
	$(TEST_BINS:=.d) $(SCRIPT_BINS:=.d)

# Fuzzing (Documentation/fuzzing.md).
# `make fuzz` builds one libFuzzer binary per selftests/fuzz/*.c with
# clang, ASan and UBSan; scripts/fuzz.sh runs them. The library sources
# are only the parsers of outside bytes and what they call, instrumented
# for coverage (fuzzer-no-link); the same harness sources are also plain
# selftests that replay the seed corpora.
FUZZ_CC ?= clang
FUZZ_O ?= build/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
FUZZ_CFLAGS := -std=gnu11 -O1 -g -Wall -Wno-unused-parameter -D_GNU_SOURCE -I include \
	-iquote . -iquote selftests \
	$(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_LIB_SRCS := loader/ktw.c loader/geom.c loader/io.c loader/error.c \
	loader/hfconfig.c loader/safetensors.c loader/route-format.c \
	loader/gguf.c kernels/pack-fp8.c kernels/pack-mxfp4.c \
	kernels/crc32c.c \
	kernels/pack.c ktcore/cpu.c
FUZZ_NAMES := $(basename $(notdir $(wildcard selftests/fuzz/*.c)))
FUZZ_BINS := $(FUZZ_NAMES:%=$(FUZZ_O)/%)
FUZZ_SECS ?= 10
.PHONY: fuzz fuzz-run
fuzz: $(FUZZ_BINS)

# CI (check-all) runs each harness for FUZZ_SECS seconds, before the tests
fuzz-run: fuzz
	$(Q)scripts/fuzz.sh -t $(FUZZ_SECS) -b $(FUZZ_O) -w $(FUZZ_O)/work
check-all: fuzz-run

$(FUZZ_O)/lib/%.o: %.c
	@mkdir -p $(@D)
	$(quiet) FUZZCC $@
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<

$(FUZZ_O)/libkt-fuzz.a: $(FUZZ_LIB_SRCS:%.c=$(FUZZ_O)/lib/%.o)
	$(quiet) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(FUZZ_O)/%: selftests/fuzz/%.c selftests/fuzz/fuzz.h $(FUZZ_O)/libkt-fuzz.a
	$(quiet) FUZZLD $@
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DKT_LIBFUZZER -MMD -MP \
		-MF $@.d -o $@ $< $(FUZZ_O)/libkt-fuzz.a -ljansson -lpthread -lm

-include $(wildcard $(FUZZ_O)/lib/*/*.d $(FUZZ_O)/*.d)

# Fault injection (Documentation/fuzzing.md).
# An ASan build with -DKT_FAULT_INJECT, its own tree: the hooks of
# loader/fault.h exist only there. selftests/loader/fault walks them.
FAULT_O ?= build/fault
.PHONY: fault-check
FAULT_MAKE = $(MAKE) --no-print-directory O=$(FAULT_O) \
	SAN=address,undefined CFLAGS=-DKT_FAULT_INJECT
fault-check:
	+$(Q)$(FAULT_MAKE) $(FAULT_O)/kt $(FAULT_O)/selftests/loader/fault
	$(Q)scripts/run-selftests.sh --kt $(FAULT_O)/kt \
		$(FAULT_O)/selftests/loader/fault
