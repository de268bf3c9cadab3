# shardlab — every entry point. `make help` lists them.
#
#   make                  build everything into build/
#   make lab-ddp NGPU=2   run a lab on N ranks through 'shardlab run' (STEPS=, ARGS=)
#   make lab-single       run the single-rank lab (STEPS=, ARGS=)
#   make lab-zero STAGE=2 ZeRO at stage 0..3 on NGPU ranks
#   make lab-pp SCHEDULE=1f1b MICRO=8  a pipeline of NGPU stages
#   make lab-ckpt POLICY=sqrt  activation checkpointing on NGPU data-parallel ranks
#   make lab-shard STRATEGY=dispatch  data sharding on NGPU ranks: slice, sampler or dispatch
#   make tui RUN=runs/..  follow or replay a run in the terminal dashboard
#   make test             every test; the last line says "N passed, N failed"
#   make docs-figures     rerun the commands the documents quote, rewrite their stale figures
#   make bench-single     tokens/s and GFLOP/s of a training step, matmul vs the naive loop
#   make deps             install the Debian packages shardlab needs
#
# Options: CUDA=1 (build the CUDA backend without a GPU here), CUDA=0 (never build it),
# NATIVE=0 (no -march=native), CC=clang,
# DEPS=0 (never install packages: without them, shardlab is built without tui, lexicon and web).

CC      ?= cc
BUILD   := build
NATIVE  ?= 1
CUDA    ?= auto
STEPS   ?=
ARGS    ?=
NGPU    ?= 2
SCHEDULE ?= 1f1b
MICRO   ?= 4
STAGE   ?= 1
POLICY  ?= every
STRATEGY ?= sampler
UI      ?= auto
RUN     ?=

WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
# The labs' sources: labs/, or a student's copy of them (make grade builds one with LABS_SRC).
LABS_SRC ?= labs
BASE    := -std=c11 -D_GNU_SOURCE -pthread -g $(WARN) -I$(LABS_SRC)
ifeq ($(NATIVE),1)
ARCH    := -march=native
else
ARCH    := -mtune=generic
endif
# -ffp-contract=fast lets the compiler fuse a*b+c into one FMA instruction: faster, and still
# the same bits on every run of the same binary.
CFLAGS  ?= -O3 $(ARCH) -ffp-contract=fast
SANFLAGS := -O1 -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
LDLIBS  := -lm -pthread

# Debian packages (labs/DESIGN.md, Dependencies); `make deps` installs the missing ones. tmux is for the
# dashboard's tests (they drive it in a terminal as a person would); libjs-chart.js draws the
# web's charts and libjs-katex its formulas (the server serves both from /usr/share/javascript);
# bubblewrap is the sandbox a student's code is built and run in (labs/command/grade/sandbox.h).
DEB_PACKAGES := libcivetweb-dev libmd4c-dev libmd4c-html0-dev libncurses-dev pkg-config tmux libjs-chart.js libjs-katex bubblewrap

# ---- CUDA: built for the GPU that is here, or when asked (CUDA=1) -------------------------
# labs/common/cuda/*.cu (kernels, cuBLAS, NCCL); without them, labs/common/cuda/nocuda.c stands in and
# every lab runs on the CPU. Which GPUs the kernels are compiled for:
#   CUDA=auto (default): only where a GPU is here (nvidia-smi lists one), and only for its
#          compute capability, so a laptop with nvcc and no GPU builds and runs the CPU labs
#          at once instead of compiling kernels it cannot run (minutes on two cores);
#   CUDA=1: whether or not a GPU is here, for sm_80 and sm_90 plus PTX for newer GPUs (CI
#          builds this way, so every CUDA file keeps compiling); CUDA=0: never.
# CUDA_ARCHS= overrides the architectures in both cases.
#   nvcc:  CUDA_HOME/bin (default /usr/local/cuda), else the one on PATH (CUDA_HOME follows it).
#   NCCL:  NCCL_HOME when given; else the first of CUDA_HOME, the system (NCCL_SYSTEM: /usr,
#          /usr/local) and PyTorch's nvidia-nccl wheel (asked of PYTHON) that holds
#          include/nccl.h, with libnccl.so or libnccl.so.2 in lib64, lib or lib/<multiarch>
#          (NVIDIA's Debian/Ubuntu packages put it in /usr/lib/x86_64-linux-gnu; the wheel ships
#          only libnccl.so.2, linked by that name).
# `make cuda-status` prints the one line that says what was found and used.
CUDA_HOME ?= /usr/local/cuda
NCCL_SYSTEM ?= /usr /usr/local
PYTHON ?= python3
NVCC := $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
# Where CUDA's headers and libraries are: the folder above the nvcc in use.
CUDA_ROOT := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),$(CUDA_HOME))
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
nccl_libdir = $(firstword $(foreach d,$(1)/lib64 $(1)/lib $(addprefix $(1)/lib/,$(MULTIARCH)),$(if $(wildcard $(d)/libnccl.so $(d)/libnccl.so.2),$(d))))
nccl_whole = $(if $(wildcard $(1)/include/nccl.h),$(if $(call nccl_libdir,$(1)),$(1)))
ifeq ($(NCCL_HOME),)
ifneq ($(CUDA),0)
ifneq ($(NVCC),)
NCCL_HOME := $(firstword $(foreach d,$(CUDA_ROOT) $(NCCL_SYSTEM),$(call nccl_whole,$(d))))
ifeq ($(NCCL_HOME),)
NCCL_WHEEL := $(shell $(PYTHON) -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
NCCL_HOME := $(if $(NCCL_WHEEL),$(call nccl_whole,$(NCCL_WHEEL)))
endif
endif
endif
NCCL_FROM :=
else
NCCL_FROM := , from NCCL_HOME
endif
NCCL_LIBDIR := $(if $(NCCL_HOME),$(call nccl_libdir,$(NCCL_HOME)))
NCCL_LIB := $(if $(wildcard $(NCCL_LIBDIR)/libnccl.so),-lnccl,-l:libnccl.so.2)
CU_SRCS := $(wildcard $(LABS_SRC)/common/cuda/*.cu)
CUDA_ARCHS_ALL := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                  -gencode arch=compute_90,code=compute_90
# The GPUs here: their compute capabilities as nvidia-smi gives them ("9.0" -> 90), digits
# only; "any" where nvidia-smi lists GPUs but is too old to say (every architecture then).
NVIDIA_SMI ?= nvidia-smi
comma := ,
# (Read in make itself, not through tr or grep: a machine's PATH may hold neither.)
digits_only = $(if $(strip $(subst 0,,$(subst 1,,$(subst 2,,$(subst 3,,$(subst 4,,$(subst 5,,$(subst 6,,$(subst 7,,$(subst 8,,$(subst 9,,$(1)))))))))))),,$(1))
ifeq ($(CUDA),auto)
GPU_CAPS := $(sort $(foreach c,$(subst .,,$(shell $(NVIDIA_SMI) --query-gpu=compute_cap --format=csv$(comma)noheader 2>/dev/null)),$(call digits_only,$(c))))
ifeq ($(GPU_CAPS),)
GPU_CAPS := $(if $(filter GPU,$(shell $(NVIDIA_SMI) -L 2>/dev/null)),any)
endif
endif
ifeq ($(filter-out any,$(GPU_CAPS)),)
CUDA_ARCHS ?= $(CUDA_ARCHS_ALL)
else
CUDA_ARCHS ?= $(foreach c,$(GPU_CAPS),-gencode arch=compute_$(c),code=sm_$(c))
endif
CUDA_FOR := for $(if $(filter-out any,$(GPU_CAPS)),$(foreach c,$(GPU_CAPS),sm_$(c))$(comma) the GPU here,sm_80$(comma) sm_90 and PTX)
NVCCFLAGS ?= -std=c++17 -O3 -lineinfo -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
ifeq ($(CUDA),0)
CUDA_STATUS := CUDA: off (CUDA=0); building the CPU backend
else ifeq ($(CUDA)$(GPU_CAPS),auto)
CUDA_STATUS := CUDA: no GPU here ($(NVIDIA_SMI) lists none); building the CPU backend (make CUDA=1 builds the CUDA backend anyway)
else ifeq ($(NVCC),)
CUDA_STATUS := CUDA: no nvcc in $(CUDA_HOME)/bin or on PATH (set CUDA_HOME); building the CPU backend
else ifeq ($(NCCL_HOME),)
CUDA_STATUS := CUDA: nvcc found at $(NVCC), but no NCCL (nccl.h and libnccl.so) in $(CUDA_ROOT), $(NCCL_SYSTEM) or $(PYTHON)'s nvidia-nccl wheel (set NCCL_HOME, or pip install nvidia-nccl-cu12); building the CPU backend
else ifeq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
CUDA_STATUS := CUDA: nvcc found at $(NVCC), but no nccl.h in NCCL_HOME=$(NCCL_HOME)/include; building the CPU backend
else ifeq ($(NCCL_LIBDIR),)
CUDA_STATUS := CUDA: nvcc found at $(NVCC), but no libnccl.so in NCCL_HOME=$(NCCL_HOME)/lib64, lib or lib/$(MULTIARCH); building the CPU backend
else
CUDA_BUILD := 1
CUDA_STATUS := CUDA: nvcc found at $(NVCC), NCCL at $(NCCL_HOME)/include/nccl.h and $(NCCL_LIBDIR)/$(if $(filter -lnccl,$(NCCL_LIB)),libnccl.so,libnccl.so.2)$(NCCL_FROM); building the CUDA backend $(CUDA_FOR); the labs pick cuda when a GPU is usable
endif

# Which backend build/ holds, and the kernels' flags, in a file rewritten only when they
# change: switching CUDA=, CUDA_ARCHS= or nvcc recompiles the kernels and relinks the labs,
# instead of leaving programs linked the other way.
BACKEND_STAMP := $(BUILD)/backend.txt
BACKEND_NOW := $(if $(CUDA_BUILD),cuda $(NVCC) $(NVCCFLAGS) $(CUDA_ARCHS) nccl $(NCCL_HOME),cpu)

# ---- the shardlab command's libraries: ncursesw, md4c, CivetWeb ----------------------------
# `shardlab run` (the launcher, its progress line, its fault handling) and `shardlab grade` need
# only libc, as the labs do; tui, lexicon and web need ncursesw, md4c and CivetWeb. Their
# headers are looked for as the compiler finds them (so CPATH counts), with DEPS_SEARCH added
# (the tests point it at fake trees: -nostdinc -I<tree>). All found: every command is built.
# Some missing: make installs them first (make deps) when it can without asking (apt-get, as
# root or through sudo without a password), then builds every command; where it cannot (a GPU
# node without root, an HPC cluster; DEPS=0; or the install failed), shardlab is built
# without tui, lexicon and web, labs/command/nolibs.c standing in for them, and one line says so and
# how to add them. `make deps-status` prints that line (nothing when all are found).
DEPS ?= auto
DEPS_SEARCH ?=
DEPS_HEADERS := curses.h=libncurses-dev md4c.h=libmd4c-dev md4c-html.h=libmd4c-html0-dev civetweb.h=libcivetweb-dev
dep_header = $(word 1,$(subst =, ,$(1)))
dep_package = $(word 2,$(subst =, ,$(1)))
headers_found = $(shell printf '\043include <%s>\n' $(1) | $(CC) $(DEPS_SEARCH) -E -x c - >/dev/null 2>&1 && echo yes)
# One compiler run where all are there; one per header only where some are not.
ifeq ($(call headers_found,$(foreach h,$(DEPS_HEADERS),$(call dep_header,$(h)))),yes)
DEPS_LACKING :=
else
DEPS_LACKING := $(strip $(foreach h,$(DEPS_HEADERS),$(if $(call headers_found,$(call dep_header,$(h))),,$(call dep_package,$(h)))))
endif
ifeq ($(DEPS_LACKING),)
SHARDLAB_KIND := full
else ifeq ($(DEPS)$(shell command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; } && echo yes),autoyes)
SHARDLAB_KIND := install
DEPS_STATUS := shardlab: tui, lexicon and web need $(DEPS_LACKING): installing them first (make deps)
else
SHARDLAB_KIND := bare
DEPS_WHY := $(if $(filter 0,$(DEPS)),DEPS=0; not installed,$(if $(filter tried,$(DEPS)),still missing after make deps,not installed))
DEPS_STATUS := shardlab: built without tui, lexicon and web ($(DEPS_WHY): $(DEPS_LACKING)); to add them, as root: make deps, then make
endif

# ---- sources --------------------------------------------------------------------------
# labs/ holds one folder per lab (NN-name/: its program, LAB.c, and the algorithm files it
# owns), common/ (what the labs share: model/, comm/, cuda/, harness/, runfiles/) and
# command/ (the shardlab command's own code, which no lab links).
# What the lab programs link (LIB_*): every common file but nocuda.c, then the CUDA backend
# or nocuda.c, and every lab folder's algorithm files. The sanitized build (the tests) is
# always CPU-only: AddressSanitizer and the CUDA runtime do not mix.
LABS_ALL  := single collectives ddp zero fsdp tp pp ckpt shard cp ep
COMMON_SRCS := $(filter-out $(LABS_SRC)/common/cuda/nocuda.c,$(wildcard $(LABS_SRC)/common/*/*.c))
COMMON_HDRS := $(wildcard $(LABS_SRC)/common/*/*.h)
COMMON_OBJS := $(COMMON_SRCS:$(LABS_SRC)/common/%.c=$(BUILD)/common/%.o)
COMMON_SAN  := $(COMMON_SRCS:$(LABS_SRC)/common/%.c=$(BUILD)/san/common/%.o) $(BUILD)/san/common/cuda/nocuda.o
# A lab's program: labs/NN-name/LAB.c (lab_src single -> labs/01-single/single.c).
lab_src = $(firstword $(wildcard $(LABS_SRC)/[0-9]*/$(1).c))
LAB_DIRS  := $(wildcard $(LABS_SRC)/[0-9]*/)
ALGO_SRCS := $(filter-out $(foreach l,$(LABS_ALL),$(call lab_src,$(l))),$(wildcard $(LAB_DIRS:%=%*.c)))
ALGO_HDRS := $(wildcard $(LAB_DIRS:%=%*.h))
ALGO_OBJS := $(ALGO_SRCS:$(LABS_SRC)/%.c=$(BUILD)/algo/%.o)
ALGO_SAN  := $(ALGO_SRCS:$(LABS_SRC)/%.c=$(BUILD)/san/algo/%.o)
LAB_LIB_SAN := $(COMMON_SAN) $(ALGO_SAN)
ifeq ($(CUDA_BUILD),1)
LIB_OBJS := $(COMMON_OBJS) $(CU_SRCS:$(LABS_SRC)/common/cuda/%.cu=$(BUILD)/common/cuda/%.o) $(ALGO_OBJS)
CUDA_LIBDIRS := $(sort $(wildcard $(CUDA_ROOT)/lib64 $(CUDA_ROOT)/lib) $(NCCL_LIBDIR))
LDLIBS_CUDA := $(CUDA_LIBDIRS:%=-L%) $(CUDA_LIBDIRS:%=-Wl,-rpath,%) $(NCCL_LIB) -lcudart -lstdc++
else
LIB_OBJS := $(COMMON_OBJS) $(BUILD)/common/cuda/nocuda.o $(ALGO_OBJS)
LDLIBS_CUDA :=
endif
# The shardlab command's modules (labs/command/: the planner, the what-if, run reading, the
# trace), always from this tree: the command and the tests link them, the lab programs do not.
# Its main and subcommands (LAUNCHER_SRCS) are compiled into build/shardlab itself.
LAUNCHER_SRCS := labs/command/shardlab.c labs/command/launcher_view.c labs/command/launcher_ranks.c labs/command/plan/plan_cmd.c labs/command/plan/whatif_cmd.c
CMD_SRCS := $(filter-out $(LAUNCHER_SRCS) labs/command/nolibs.c,$(wildcard labs/command/*.c labs/command/plan/*.c labs/command/runs/*.c))
CMD_HDRS := $(wildcard labs/command/*.h labs/command/plan/*.h labs/command/runs/*.h)
CMD_OBJS := $(CMD_SRCS:labs/command/%.c=$(BUILD)/command/%.o)
CMD_SAN  := $(CMD_SRCS:labs/command/%.c=$(BUILD)/san/command/%.o)
# The tests link what the labs link and the command's modules.
LIB_SAN := $(LAB_LIB_SAN) $(CMD_SAN)
LAB_BINS  := $(LABS_ALL:%=$(BUILD)/labs/%)
LAB_SAN   := $(LABS_ALL:%=$(BUILD)/san/labs/%)
# The grader's reference programs (labs/command/grade/solutions.c), ref/ beside the lab programs: the
# labs a reference run starts (single; shard -n 1; zero --stage 0 for ZeRO's and FSDP's
# --mixed), linked with the grader's own code in place of every student region they reach.
# --wrap sends each call of a region function from another file to the grader's __wrap_ one;
# the regions they hold but do not call at one rank are listed in solutions.c.
REF_LABS  := single shard zero
REF_WRAP  := -Wl,--wrap=adamw_update -Wl,--wrap=sampler_epoch -Wl,--wrap=shard_layout_init
REF_BINS  := $(REF_LABS:%=$(BUILD)/labs/ref/%)
REF_SAN   := $(REF_LABS:%=$(BUILD)/san/labs/ref/%)
# The deliberately broken labs that the labs' tests prove the graders catch (tests/breaks/):
# each lab linked with a file that misbehaves in one step of it, put in with --wrap as the
# references' solutions are (BREAK_WRAP_<lab>: the functions it replaces), from the objects
# the lab programs are built from, as the tests run those: the lab files hold no test code.
BREAK_LABS := ddp zero fsdp tp pp ckpt shard
BREAK_BINS := $(BREAK_LABS:%=$(BUILD)/breaks/%)
BREAK_WRAP_ddp := dist_all_reduce_start dist_wait
BREAK_WRAP_zero := train_args_parse sharded_all_gather
BREAK_WRAP_fsdp := sharded_reduce_gradient
BREAK_WRAP_tp := tp_f_backward
BREAK_WRAP_pp := outbox_post
BREAK_WRAP_ckpt := gpt_layer_forward gpt_layer_backward
BREAK_WRAP_shard := shard_first
# The terminal dashboard (tui/): the drawing is plain C (the tests and the fuzzer link it
# without a terminal); tui.c drives ncurses. ncursesw's flags are read when a rule needs
# them, after `make deps` has had the chance to install it (hence '=', not ':=').
TUI_DRAW  := canvas dashboard lossplot busbwplot memview timeline mdterm lexicon
TUI_OBJS  := $(TUI_DRAW:%=$(BUILD)/tui/%.o) $(BUILD)/tui/tui.o
TUI_SAN   := $(TUI_DRAW:%=$(BUILD)/san/tui/%.o) $(BUILD)/san/tui/tui.o
TUI_DRAW_SAN := $(TUI_DRAW:%=$(BUILD)/san/tui/%.o)
NCURSES_CFLAGS = $(shell pkg-config --cflags ncursesw 2>/dev/null)
NCURSES_LIBS   = $(shell pkg-config --libs ncursesw 2>/dev/null || echo -lncursesw)
# The course as the terminal and the web read it (labs/command/course/: the lexicon's terms, the
# lessons' titles, links), plain C; both link it, neither through the other.
COURSE_OBJ := $(BUILD)/course/course.o
COURSE_SAN := $(BUILD)/san/course/course.o
# md4c's parser renders the lexicon and the lessons (tui/mdterm.c), for shardlab and the tests.
MD4C_LIBS := -lmd4c
# The web server (web/): CivetWeb (no pkg-config file) and md4c's HTML renderer.
WEB_SRCS  := $(sort $(basename $(notdir $(wildcard web/*.c))))
WEB_OBJS  := $(WEB_SRCS:%=$(BUILD)/web/%.o)
WEB_SAN   := $(WEB_SRCS:%=$(BUILD)/san/web/%.o)
WEB_LIBS  := -lcivetweb -lmd4c-html -lmd4c
# The table of the TODO regions (tests/todo/regions.c): make check's driver and the web's lab
# pages ("Your TODO regions") read the one table; shardlab links it.
TODO_TABLE := tests/todo/regions.c
# What build/shardlab links: every command, or (bare) the launcher and the grader with
# labs/command/nolibs.c in place of tui/ and web/, and no library beyond libc and libm.
ifeq ($(SHARDLAB_KIND),bare)
SHARDLAB_PARTS := $(BUILD)/nolibs.o
SHARDLAB_LIBS  :=
else
SHARDLAB_PARTS = $(TUI_OBJS) $(WEB_OBJS) $(COURSE_OBJ)
SHARDLAB_LIBS  = $(NCURSES_LIBS) $(WEB_LIBS)
endif
# The grader (labs/command/grade/): `shardlab grade`, linked into the launcher; sandbox_cmd.c is the
# main of the sandbox program (SANDBOX), not part of it.
GRADE_SRCS := $(filter-out sandbox_cmd,$(sort $(basename $(notdir $(wildcard labs/command/grade/*.c)))))
GRADE_OBJS := $(GRADE_SRCS:%=$(BUILD)/grade/%.o)
GRADE_SAN  := $(GRADE_SRCS:%=$(BUILD)/san/grade/%.o)
# The launcher; it runs the labs next to it (build/labs, or build/san/labs for its own copy).
# It never touches a GPU, so it links the CPU backend (nocuda.c) even in a CUDA build: CUDA's
# libraries carry so much thread-local storage that CivetWeb's worker threads, created with
# a small fixed stack, cannot start in a process that loads them.
# The command: labs/command/shardlab.c (the launcher, `shardlab run`, and the other commands),
# with the launcher's view of a run and its reading of the ranks' endings (launcher.h).
SHARDLAB_LIB := $(COMMON_OBJS) $(BUILD)/common/cuda/nocuda.o $(ALGO_OBJS) $(CMD_OBJS)
SHARDLAB     := $(BUILD)/shardlab
SHARDLAB_SAN := $(BUILD)/san/shardlab
# The sandbox a student's code is built and run in (labs/command/grade/sandbox.h): this program for
# the builds below; the grader and make check's driver link the same module.
SANDBOX      := $(BUILD)/sandbox
# Every tests/test_*.c is a program; tests/run.sh runs them all.
TEST_SRCS := $(wildcard tests/test_*.c)
# The emulated CUDA kernels' tests (tests/gpu/*.cc) are C++: built where there is a C++
# compiler (.ci/run installs g++), else `make test` says they were left out.
HAVE_CXX := $(shell command -v $(CXX) >/dev/null 2>&1 && echo 1)
EMU_TESTS := $(if $(HAVE_CXX),$(BUILD)/san/tests/test_flash_tc $(BUILD)/san/tests/test_hash_kernel $(BUILD)/san/tests/test_ring_kernels)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/san/tests/%) $(EMU_TESTS)

.PHONY: docs-figures grade-sweep starter grade grade-labs ref-programs check check-programs todo-checks todo-programs all help deps deps-ncurses deps-browser deps-status FORCE test test-programs web lexicon lab-single lab-zero lab-pp lab-ckpt lab-shard tui fuzz bench-single bench-collectives bench-ddp bench-zero bench-parallel bench-cp bench-tui bench-web bench-gpu profile-gpu gpu-check clean cuda-status
.DEFAULT_GOAL := all
# Keep the object files make would otherwise delete as intermediates.
.SECONDARY:

# What make says: one line per file it builds ("  CC      labs/common/model/gpt.c", "  LD      build/labs/ddp");
# V=1 prints the full commands instead, make -s nothing.
V ?= 0
SILENT := $(findstring s,$(firstword -$(MAKEFLAGS)))
quiet = $(if $(filter 1,$(V)),,@$(if $(SILENT),,printf '  %-7s %s\n' '$(1)' '$(2)';))

all: cuda-status deps-status $(LAB_BINS) $(REF_BINS) $(SHARDLAB) $(SANDBOX)
# What the lab-* targets need: the programs, without the CUDA line (make and make all say it).
LABS_BUILT = deps-status $(LAB_BINS) $(SHARDLAB)

cuda-status:
	@echo "$(CUDA_STATUS)"

deps-status:
	@$(if $(DEPS_STATUS),echo "$(DEPS_STATUS)",:)

help:
	@echo "shardlab make targets:"
	@echo "  make                  build every lab into build/ (CUDA kernels only for a GPU here; CUDA=1: for every GPU,"
	@echo "                        CUDA=0: CPU only, NATIVE=0: portable code,"
	@echo "                        DEPS=0: install nothing; without ncursesw, md4c, CivetWeb: no tui, lexicon, web;"
	@echo "                        a line per file it builds, V=1: the full commands)"
	@echo "  make lab-ddp NGPU=2   data parallelism from scratch on N ranks [STEPS=N] [ARGS=\"--bucket-mb 1\"]"
	@echo "  make lab-zero STAGE=2 NGPU=4  ZeRO stage 0-3: the training state sharded [ARGS=\"--mixed --offload\"]"
	@echo "  make lab-fsdp NGPU=4   FSDP: flat sharded units gathered as they run [ARGS=\"--prefetch --no-reshard --mixed --replicate 2\"]"
	@echo "  make lab-tp NGPU=4     tensor parallelism, Megatron-style [ARGS=\"--sp --dp 2 --vocab-parallel\"]"
	@echo "  make lab-cp NGPU=4     context parallelism: each sequence split, K/V passed around a ring [ARGS=\"--layout contiguous --kv all-gather\"]"
	@echo "  make lab-ep NGPU=4     expert parallelism: E/N experts a rank, tokens sent by all-to-all [ARGS=\"--moe 8 --topk 2 --capacity 1.25\"]"
	@echo "  make lab-pp NGPU=4 SCHEDULE=1f1b MICRO=8  pipeline parallelism: gpipe, 1f1b, interleaved [SCHEDULE=interleaved ARGS=\"--chunks 2\"]"
	@echo "  make lab-ckpt NGPU=2 POLICY=sqrt  activation checkpointing: none, every, sqrt or K, on N DDP ranks [ARGS=\"--layers 8\"]"
	@echo "  make lab-shard NGPU=2 STRATEGY=sampler  data sharding: slice, sampler or dispatch [ARGS=\"--weights 1,3 --temperature 2\"]"
	@echo "  make lab-collectives NGPU=4   every collective timed and checked, nccl-tests style"
	@echo "  make lab-single       train one rank: where training memory goes [STEPS=N] [ARGS=\"--dim 128\"]"
	@echo "  make tui RUN=runs/..  the terminal dashboard on a run, live or finished (default: the newest)"
	@echo "  make web              the course in the browser at http://127.0.0.1:8080 [PORT=8081]"
	@echo "  make lexicon TERM=zero-stage-3  a lexicon entry in the terminal (no TERM: the index)"
	@echo "  make lesson N=5       a lesson in the terminal, by number or name (no N: the list)"
	@echo "  make starter OUT=dir  a student's copy: the solution regions of labs/ replaced by TODO stubs"
	@echo "  make grade LABS=dir   build a student's copy, run every lab's graded configurations, print the rubric [ONLY=ddp,zero-3] [STEPS=1000] [OUT=dir]"
	@echo "                        (in a sandbox: no network, none of your files; each run stopped after DEADLINE=600 s)"
	@echo "  make check [TODO=<name>]  each TODO region of a student's copy checked alone in seconds: passed, failed (where, expected vs got) or not written yet [LABS=dir] [DEADLINE=60]"
	@echo "  make test             build and run every test (sanitized); ends with 'N passed, N failed'"
	@echo "  make docs-figures     rerun every command the READMEs, lessons/ and lexicon/ quote, rewrite their stale figures in place; review the diff [DOC=labs/README.md]"
	@echo "  make fuzz             fuzz the run-log reader, the dashboard and the grader with libFuzzer (clang) [FUZZ_SECONDS=60 each]"
	@echo "  make bench-single     tokens/s and GFLOP/s of a training step; matmul vs the naive loop"
	@echo "  make bench-ddp        DDP on NGPU ranks vs single: step time side by side, and the ratio"
	@echo "  make bench-zero       ZeRO stages 0-3 and FSDP vs DDP, N=2 and 4: step time ratio and peak memory"
	@echo "  make bench-parallel   TP and each pipeline schedule vs single, N=2 and 4: step time ratio, bubble"
	@echo "  make bench-cp         cp zig-zag vs contiguous, N=2 and 4: attention max/min over ranks, the ring's hidden share"
	@echo "  make bench-web        shardlab web vs nginx on the same rendered page (wrk): requests/s and the ratio"
	@echo "  make bench-tui        the same DDP run with and without the dashboard open: step time ratio"
	@echo "  make bench-collectives  shardlab's all-reduce vs Open MPI's, N=2 and 4: bus bandwidth ratio (COLL=all_to_all)"
	@echo "  make grade-sweep      the READMEs' lab commands at 200 and 1000 steps, each graded: full marks expected (~10 min) [LENGTHS=\"200 1000\"]"
	@echo "  make gpu-check        on a GPU machine: every lab on CUDA vs the CPU, kernels vs CPU, a step vs PyTorch"
	@echo "  make bench-gpu        on a GPU: a step of shardlab vs PyTorch (eager, sdpa, torch.compile), fp32/TF32/bf16: ms, peak, ratios [SHAPES=\"default gpt2\"]"
	@echo "  make profile-gpu      on a GPU with ncu: one step's kernels timed, by kernel and kind, and the GPU's idle time [PRECISIONS=\"fp32 tf32 bf16\"]"
	@echo "  make deps             install the Debian packages shardlab needs ($(DEB_PACKAGES))"
	@echo "  make clean            remove build/ (runs/ is kept)"

# ---- deps -----------------------------------------------------------------------------
# Installs only what is missing: apt-get as root, sudo otherwise, else prints the command.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all installed ($(DEB_PACKAGES))"; exit 0; fi; \
	echo "deps: missing:$$missing"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "deps: no apt-get here; install the equivalents of:$$missing"; exit 1; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; \
	else echo "deps: not root and no sudo; run as root:"; \
	     echo "  apt-get update && apt-get install -y$$missing"; exit 1; fi; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq$$missing

# The browser test (tests/browser): Debian's Chromium, Node.js and npm if missing, then
# playwright-core from npm at the version package-lock.json pins.
deps-browser:
	@pkgs=""; [ -x /usr/bin/chromium ] || pkgs="$$pkgs chromium"; \
	command -v npm >/dev/null 2>&1 || pkgs="$$pkgs nodejs npm"; \
	if [ -n "$$pkgs" ]; then $(MAKE) --no-print-directory deps DEB_PACKAGES="$$pkgs"; fi
	@[ -d tests/browser/node_modules/playwright-core ] || npm ci --prefix tests/browser --no-audit --no-fund

# What tui/ and web/ need (ncursesw, md4c, CivetWeb): installed first where make can (see
# SHARDLAB_KIND), before their objects compile.
deps-ncurses:
	@$(if $(filter install,$(SHARDLAB_KIND)),$(MAKE) --no-print-directory deps,:)

# ---- build ----------------------------------------------------------------------------
$(BUILD)/common/%.o: $(LABS_SRC)/common/%.c $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/san/common/%.o: $(LABS_SRC)/common/%.c $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(SANFLAGS) -c $< -o $@

$(ALGO_OBJS): $(BUILD)/algo/%.o: $(LABS_SRC)/%.c $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -c $< -o $@

$(ALGO_SAN): $(BUILD)/san/algo/%.o: $(LABS_SRC)/%.c $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(SANFLAGS) -c $< -o $@

$(BUILD)/command/%.o: labs/command/%.c $(CMD_HDRS) $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/san/command/%.o: labs/command/%.c $(CMD_HDRS) $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(SANFLAGS) -c $< -o $@

$(BACKEND_STAMP): FORCE
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = '$(BACKEND_NOW)' ] || echo '$(BACKEND_NOW)' >$@

$(BUILD)/common/cuda/%.o: $(LABS_SRC)/common/cuda/%.cu $(LABS_SRC)/common/cuda/*.cuh $(COMMON_HDRS) $(BACKEND_STAMP)
	@mkdir -p $(@D)
	$(call quiet,NVCC,$<)$(NVCC) $(NVCCFLAGS) $(CUDA_ARCHS) -I$(LABS_SRC) -I$(NCCL_HOME)/include -c $< -o $@

$(BUILD)/tui/%.o: tui/%.c tui/*.h labs/command/course/*.h $(COMMON_HDRS) $(CMD_HDRS) | $(BUILD)/tui deps-ncurses
	$(call quiet,CC,$<)$(CC) $(BASE) -Itui $(NCURSES_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/san/tui/%.o: tui/%.c tui/*.h labs/command/course/*.h $(COMMON_HDRS) $(CMD_HDRS) | $(BUILD)/san/tui deps-ncurses
	$(call quiet,CC,$<)$(CC) $(BASE) -Itui $(NCURSES_CFLAGS) $(SANFLAGS) -c $< -o $@

$(BUILD)/course/%.o: labs/command/course/%.c labs/command/course/*.h $(COMMON_HDRS) | $(BUILD)/course
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/san/course/%.o: labs/command/course/%.c labs/command/course/*.h $(COMMON_HDRS) | $(BUILD)/san/course
	$(call quiet,CC,$<)$(CC) $(BASE) $(SANFLAGS) -c $< -o $@

# A lab's program from its folder's LAB.c (lab_src, read after the rules: second expansion).
.SECONDEXPANSION:
$(BUILD)/labs/%: $$(call lab_src,$$*) $(LIB_OBJS) $(COMMON_HDRS) $(ALGO_HDRS) $(BACKEND_STAMP) | $(BUILD)/labs
	$(call quiet,LD,$@)$(CC) $(BASE) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS) $(LDLIBS_CUDA)

$(BUILD)/san/labs/%: $$(call lab_src,$$*) $(LAB_LIB_SAN) $(COMMON_HDRS) $(ALGO_HDRS) | $(BUILD)/san/labs
	$(call quiet,LD,$@)$(CC) $(BASE) $(SANFLAGS) $< $(LAB_LIB_SAN) -o $@ $(LDLIBS)

$(BUILD)/labs/ref/%: $$(call lab_src,$$*) $(LIB_OBJS) $(BUILD)/grade/solutions.o $(COMMON_HDRS) $(ALGO_HDRS) | $(BUILD)/labs/ref
	$(call quiet,LD,$@)$(CC) $(BASE) $(CFLAGS) $< $(LIB_OBJS) $(BUILD)/grade/solutions.o $(REF_WRAP) -o $@ $(LDLIBS) $(LDLIBS_CUDA)

$(BUILD)/san/labs/ref/%: $$(call lab_src,$$*) $(LAB_LIB_SAN) $(BUILD)/san/grade/solutions.o $(COMMON_HDRS) $(ALGO_HDRS) | $(BUILD)/san/labs/ref
	$(call quiet,LD,$@)$(CC) $(BASE) $(SANFLAGS) $< $(LAB_LIB_SAN) $(BUILD)/san/grade/solutions.o $(REF_WRAP) -o $@ $(LDLIBS)

# Every broken lab also says what is broken in it (tests/breaks/breaks.c wraps lab_start).
$(BUILD)/breaks/%: $$(call lab_src,$$*) tests/breaks/%.c tests/breaks/breaks.c tests/breaks/breaks.h $(LIB_OBJS) $(COMMON_HDRS) $(ALGO_HDRS) $(BACKEND_STAMP)
	@mkdir -p $(@D)
	$(call quiet,LD,$@)$(CC) $(BASE) $(CFLAGS) $< tests/breaks/$*.c tests/breaks/breaks.c $(LIB_OBJS) $(addprefix -Wl$(comma)--wrap=,lab_start $(BREAK_WRAP_$*)) -o $@ $(LDLIBS) $(LDLIBS_CUDA)

# test_todo and test_variants read the table of the TODO regions (tests/todo/regions.c).
$(BUILD)/san/tests/test_todo $(BUILD)/san/tests/test_variants: tests/todo/regions.c tests/todo/regions.h

# CUDA kernels run on the CPU by tests/gpu/emulate.h (the tensor cores' flash attention,
# labs/common/cuda/flash_tc.cuh; the param_hash's chunks, hash.cuh; ring attention's, ring.cuh): built by the host's C++
# compiler, with or without CUDA (sanitized, at -O2: the emulated warps' exchanges are most
# of the time).
$(BUILD)/san/tests/test_flash_tc $(BUILD)/san/tests/test_hash_kernel $(BUILD)/san/tests/test_ring_kernels: $(BUILD)/san/tests/%: tests/gpu/%.cc tests/gpu/emulate.h tests/*.h $(wildcard $(LABS_SRC)/common/cuda/*.cuh) $(LIB_SAN) $(COMMON_HDRS) $(ALGO_HDRS) | $(BUILD)/san/tests
	$(call quiet,CXX,$@)$(CXX) -std=c++20 -g -pthread -Wall -Wextra -Wno-unknown-pragmas -I$(LABS_SRC) -Itests $(SANFLAGS) -O2 $< $(LIB_SAN) -o $@ $(LDLIBS)

$(BUILD)/san/tests/%: tests/%.c tests/*.h $(LIB_SAN) $(TUI_DRAW_SAN) $(COURSE_SAN) $(COMMON_HDRS) $(CMD_HDRS) $(ALGO_HDRS) | $(BUILD)/san/tests
	$(call quiet,LD,$@)$(CC) $(BASE) $(SANFLAGS) -Itests -Itui $< $(LIB_SAN) $(TUI_DRAW_SAN) $(COURSE_SAN) -o $@ $(LDLIBS) $(MD4C_LIBS)

$(BUILD)/web/%.o: web/%.c web/*.h labs/command/course/*.h $(COMMON_HDRS) $(CMD_HDRS) labs/command/grade/*.h tests/todo/regions.h $(ALGO_HDRS) | $(BUILD)/web deps-ncurses
	$(call quiet,CC,$<)$(CC) $(BASE) -Iweb -Itests/todo $(CFLAGS) -c $< -o $@

$(BUILD)/san/web/%.o: web/%.c web/*.h labs/command/course/*.h $(COMMON_HDRS) $(CMD_HDRS) labs/command/grade/*.h tests/todo/regions.h $(ALGO_HDRS) | $(BUILD)/san/web deps-ncurses
	$(call quiet,CC,$<)$(CC) $(BASE) -Iweb -Itests/todo $(SANFLAGS) -c $< -o $@

$(BUILD)/grade/%.o: labs/command/grade/%.c labs/command/grade/*.h $(COMMON_HDRS) $(CMD_HDRS) $(ALGO_HDRS) | $(BUILD)/grade
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/san/grade/%.o: labs/command/grade/%.c labs/command/grade/*.h $(COMMON_HDRS) $(CMD_HDRS) $(ALGO_HDRS) | $(BUILD)/san/grade
	$(call quiet,CC,$<)$(CC) $(BASE) $(SANFLAGS) -c $< -o $@

ifeq ($(SHARDLAB_KIND),install)
# The libraries are missing but make may install them: make deps, then build shardlab again
# in a make that looks anew (with all of them, or, if the install failed, without).
$(SHARDLAB): FORCE
	@$(MAKE) --no-print-directory deps || echo "shardlab: installing $(DEPS_LACKING) failed (above)"
	@$(MAKE) --no-print-directory DEPS=tried $@ deps-status
else
$(SHARDLAB): $(LAUNCHER_SRCS) $(TODO_TABLE) $(CMD_HDRS) $(SHARDLAB_LIB) $(SHARDLAB_PARTS) $(GRADE_OBJS) $(COMMON_HDRS) tui/*.h web/*.h labs/command/grade/*.h labs/command/course/*.h tests/todo/regions.h | $(BUILD)/labs
	$(call quiet,LD,$@)$(CC) $(BASE) -Itui -Iweb $(CFLAGS) $(LAUNCHER_SRCS) $(TODO_TABLE) $(SHARDLAB_LIB) $(SHARDLAB_PARTS) $(GRADE_OBJS) -o $@ $(LDLIBS) $(SHARDLAB_LIBS)
endif
FORCE:

$(BUILD)/nolibs.o: labs/command/nolibs.c $(COMMON_HDRS) $(CMD_HDRS) tui/*.h web/*.h
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) -Itui -Iweb $(CFLAGS) -c $< -o $@

$(SHARDLAB_SAN): $(LAUNCHER_SRCS) $(TODO_TABLE) $(CMD_HDRS) $(LIB_SAN) $(TUI_SAN) $(WEB_SAN) $(COURSE_SAN) $(GRADE_SAN) $(COMMON_HDRS) tui/*.h web/*.h labs/command/grade/*.h labs/command/course/*.h tests/todo/regions.h | $(BUILD)/san/labs
	$(call quiet,LD,$@)$(CC) $(BASE) -Itui -Iweb $(SANFLAGS) $(LAUNCHER_SRCS) $(TODO_TABLE) $(LIB_SAN) $(TUI_SAN) $(WEB_SAN) $(COURSE_SAN) $(GRADE_SAN) -o $@ $(LDLIBS) $(NCURSES_LIBS) $(WEB_LIBS)

# The fuzzer (clang's libFuzzer) on the run-log reader and the dashboard's drawing.
FUZZ_SECONDS ?= 60
$(BUILD)/fuzz/fuzz_runread: tests/fuzz/fuzz_runread.c tests/fuzz/runread_target.h $(COMMON_SRCS) $(ALGO_SRCS) $(CMD_SRCS) labs/common/cuda/nocuda.c $(TUI_DRAW:%=tui/%.c) labs/command/course/course.c $(COMMON_HDRS) tui/*.h
	@mkdir -p $(@D)
	$(call quiet,LD,$@)clang $(BASE) -Itui -Itests -O1 -g -fsanitize=fuzzer,address,undefined $< $(COMMON_SRCS) $(ALGO_SRCS) $(CMD_SRCS) labs/common/cuda/nocuda.c $(TUI_DRAW:%=tui/%.c) labs/command/course/course.c -o $@ $(LDLIBS) $(MD4C_LIBS)

# ... and on the grader: a run directory's files from one input, loaded and graded (no lab
# starts: the run is its own --ref). UB stops it too (-fno-sanitize-recover).
$(BUILD)/fuzz/fuzz_grade: tests/fuzz/fuzz_grade.c $(COMMON_SRCS) $(ALGO_SRCS) $(CMD_SRCS) labs/common/cuda/nocuda.c $(GRADE_SRCS:%=labs/command/grade/%.c) $(COMMON_HDRS) labs/command/grade/*.h
	@mkdir -p $(@D)
	$(call quiet,LD,$@)clang $(BASE) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $< $(COMMON_SRCS) $(ALGO_SRCS) $(CMD_SRCS) labs/common/cuda/nocuda.c $(GRADE_SRCS:%=labs/command/grade/%.c) -o $@ $(LDLIBS)

fuzz: $(BUILD)/fuzz/fuzz_runread $(BUILD)/fuzz/fuzz_grade
	@mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/corpus-grade
	$(BUILD)/fuzz/fuzz_runread -max_total_time=$(FUZZ_SECONDS) -max_len=8192 $(BUILD)/fuzz/corpus tests/fuzz/seeds
	$(BUILD)/fuzz/fuzz_grade -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/corpus-grade tests/fuzz/seeds-grade

# Small stand-in programs the tests run (tests/fixtures/ranklab.c: a lab for the launcher's tests).
$(BUILD)/san/fixtures/ranklab: tests/fixtures/ranklab.c $(LIB_SAN) $(COMMON_HDRS)
	@mkdir -p $(@D)
	$(call quiet,LD,$@)$(CC) $(BASE) $(SANFLAGS) $< $(LIB_SAN) -o $@ $(LDLIBS)

$(BUILD)/bench/%: tests/bench/%.c $(LIB_OBJS) $(COMMON_HDRS) $(BACKEND_STAMP) | $(BUILD)/bench
	$(call quiet,LD,$@)$(CC) $(BASE) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS) $(LDLIBS_CUDA)

# GPU tests: built with the CUDA backend, run by tests/gpu/check.sh (they skip without a GPU).
$(BUILD)/gpu/%: tests/gpu/%.c $(LIB_OBJS) $(COMMON_HDRS) $(BACKEND_STAMP) | $(BUILD)/gpu
	$(call quiet,LD,$@)$(CC) $(BASE) $(CFLAGS) -Itests $< $(LIB_OBJS) -o $@ $(LDLIBS) $(LDLIBS_CUDA)

$(BUILD)/labs/ref $(BUILD)/san/labs/ref $(BUILD)/grade $(BUILD)/san/grade $(BUILD)/web $(BUILD)/san/web $(BUILD)/tui $(BUILD)/san/tui $(BUILD)/course $(BUILD)/san/course $(BUILD)/gpu $(BUILD)/labs $(BUILD)/san/labs $(BUILD)/san/tests $(BUILD)/bench:
	@mkdir -p $@

# ---- run ------------------------------------------------------------------------------
# One rank, through the launcher like every lab (so it gets the dashboard too).
lab-single: deps-status $(BUILD)/labs/single $(SHARDLAB)
	$(SHARDLAB) run single -n 1 --ui $(UI) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# ZeRO at STAGE=0..3 (0: DDP), on NGPU ranks.
lab-zero: $(LABS_BUILT)
	$(SHARDLAB) run zero -n $(NGPU) --ui $(UI) --stage $(STAGE) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# A pipeline of NGPU stages: SCHEDULE=gpipe|1f1b|interleaved, MICRO=m micro-batches.
lab-pp: $(LABS_BUILT)
	$(SHARDLAB) run pp -n $(NGPU) --ui $(UI) --schedule $(SCHEDULE) --micro $(MICRO) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# Activation checkpointing with POLICY=none|every|sqrt|K, on NGPU data-parallel ranks.
lab-ckpt: $(LABS_BUILT)
	$(SHARDLAB) run ckpt -n $(NGPU) --ui $(UI) --policy $(POLICY) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# Data sharding on NGPU ranks: STRATEGY=slice|sampler|dispatch (who holds the data, what moves).
lab-shard: $(LABS_BUILT)
	$(SHARDLAB) run shard -n $(NGPU) --ui $(UI) --strategy $(STRATEGY) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# Every other lab runs on NGPU ranks through the launcher.
lab-%: $(LABS_BUILT)
	$(SHARDLAB) run $* -n $(NGPU) --ui $(UI) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# ---- grading ----------------------------------------------------------------------------
# make starter OUT=dir: a student's copy of the project, the solution regions of labs/
# replaced by TODO stubs (labs/command/grade/starter.sh). make grade LABS=dir: build the labs of a
# student's copy (of the project, or of its labs/) on the CPU into build/student/<hash>, run
# every lab's graded configurations with them and grade each with this build's shardlab,
# whose references run this build's reference programs (REF_BINS: none of a student's
# regions runs in them, so a student's own make grade in their copy scores what the
# instructor's make grade LABS=<copy> gives). ONLY=ddp,zero-3 picks labs or configurations;
# STEPS=1000 runs the training configurations that long; OUT=dir keeps the graded runs,
# grade.json and grade.xml there (default runs/grade-<time>); the single-rank references are
# kept in REFS (default build/grade-refs) and shared by every student graded with this build.
LABS    ?= labs
ONLY    ?=
GRADE_SRC = $(if $(wildcard $(LABS)/labs/common/*/*.c),$(LABS)/labs,$(LABS))
GRADE_BUILD = $(BUILD)/student/$(firstword $(shell echo '$(abspath $(GRADE_SRC))' | cksum))
# A copy is built, run and checked in the sandbox (labs/command/grade/sandbox.h): no network, its own
# build and run folders the only ones it may write, nothing of yours it may read, limits, and a
# deadline. DEADLINE=<seconds>: each graded run's (default 600) or each check's (default 60);
# BUILD_DEADLINE: the copy's build's. The build sees the copy, this Makefile and tests/todo/.
DEADLINE ?=
BUILD_DEADLINE ?= 1800
SANDBOX_BUILD = $(SANDBOX) --what "make $(1): the build of $(GRADE_SRC)" --deadline $(BUILD_DEADLINE) \
  --read Makefile --read tests/todo --read $(GRADE_SRC) --write $(GRADE_BUILD) --

starter:
	@if [ -z "$(OUT)" ]; then echo "make starter: say where: make starter OUT=dir" >&2; exit 2; fi
	@sh labs/command/grade/starter.sh "$(OUT)"

grade: all
	@if [ ! -d "$(GRADE_SRC)/common" ]; then \
	  echo "make grade: $(LABS) is not a copy of shardlab or of its labs/ (no common/ folder)" >&2; exit 2; fi
	@echo "make grade: building $(GRADE_SRC) into $(GRADE_BUILD) (CPU, in the sandbox)"
	@rm -f $(addprefix $(GRADE_BUILD)/labs/,$(LABS_ALL))
	-@$(call SANDBOX_BUILD,grade) $(MAKE) --no-print-directory -k BUILD=$(GRADE_BUILD) LABS_SRC=$(GRADE_SRC) CUDA=0 DEPS=0 grade-labs
	$(SHARDLAB) grade --labs $(GRADE_BUILD)/labs $(if $(ONLY),--only $(ONLY)) $(if $(STEPS),--steps $(STEPS)) $(if $(OUT),--out $(OUT)) --refs $(or $(REFS),$(BUILD)/grade-refs) $(if $(DEADLINE),--deadline $(DEADLINE))

# The lab programs alone, from LABS_SRC into BUILD (what make grade builds); the reference
# programs alone (what tests/test_variants.c builds from a starter's sources).
grade-labs: $(LAB_BINS)
ref-programs: $(REF_BINS)

# make check [TODO=<name>] [LABS=dir]: each TODO region of a student's copy checked alone, in
# seconds, against a reference written in the check (tests/todo/): a line per region, passed,
# failed (which rank, chunk, round or micro-batch; expected against got) or not written yet.
# Built like make grade builds a copy's labs (CPU, into build/student/<hash>/todo); the build's
# output goes to its build.log, and a region whose check does not build says so with the errors.
# make web builds the same programs (check-programs) and hands them to the server, whose lab
# pages run them ("Your TODO regions"); a region that does not compile fails neither.
# The check programs are built in the sandbox; the driver, which takes nothing from the copy
# and starts each check program in the sandbox, is this build's (copied beside them).
TODO_PROGRAMS := adamw ring shard ddp zero fsdp tp pp ckpt cp ep
TODO_CHECKS := $(TODO_PROGRAMS:%=$(BUILD)/todo/check_%)
TODO_BINS := $(TODO_CHECKS) $(BUILD)/todo/check
CHECK_GOAL = $(firstword $(filter check web,$(MAKECMDGOALS)) check)
check-programs: $(SANDBOX) $(BUILD)/todo/check
	@if [ ! -d "$(GRADE_SRC)/common" ]; then \
	  echo "make $(CHECK_GOAL): $(LABS) is not a copy of shardlab or of its labs/ (no common/ folder)" >&2; exit 2; fi
	@mkdir -p $(GRADE_BUILD)/todo
	@rm -f $(TODO_PROGRAMS:%=$(GRADE_BUILD)/todo/check_%)
	@[ -n "$$(ls $(GRADE_BUILD)/common/*/*.o 2>/dev/null)" ] || echo "make $(CHECK_GOAL): building $(GRADE_SRC) into $(GRADE_BUILD) (CPU, in the sandbox; once, then only what changed)"
	-@$(call SANDBOX_BUILD,$(CHECK_GOAL)) $(MAKE) --no-print-directory -k BUILD=$(GRADE_BUILD) LABS_SRC=$(GRADE_SRC) CUDA=0 DEPS=0 todo-checks >$(GRADE_BUILD)/todo/build.log 2>&1
	@cp -f $(BUILD)/todo/check $(GRADE_BUILD)/todo/check

check: check-programs
	@$(GRADE_BUILD)/todo/check --bin $(GRADE_BUILD)/todo --labs $(LABS) $(if $(DEADLINE),--deadline $(DEADLINE)) $(TODO)

# The check programs alone, from LABS_SRC into BUILD (what make check builds), and the driver.
todo-checks: $(TODO_CHECKS)
todo-programs: $(TODO_BINS)

$(BUILD)/todo/check_%.o: tests/todo/check_%.c tests/todo/*.h $(wildcard $(LABS_SRC)/[0-9]*/*.c) $(COMMON_HDRS) $(ALGO_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -Itests/todo -c $< -o $@

$(BUILD)/todo/todo.o: tests/todo/todo.c tests/todo/*.h $(COMMON_HDRS)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(BASE) $(CFLAGS) -Itests/todo -c $< -o $@

$(BUILD)/todo/check_%: $(BUILD)/todo/check_%.o $(BUILD)/todo/todo.o $(LIB_OBJS)
	$(call quiet,LD,$@)$(CC) $(BASE) $(CFLAGS) $^ -o $@ $(LDLIBS) $(LDLIBS_CUDA)

# The driver takes nothing from the copy it checks: its JSON comes from this tree's common/, its
# sandbox from the grader's (labs/command/grade/sandbox.c).
TODO_DRIVER_CORE := labs/common/runfiles/strbuf.c labs/common/runfiles/json.c labs/common/harness/check.c labs/command/grade/sandbox.c
$(BUILD)/todo/check: tests/todo/driver.c tests/todo/regions.c tests/todo/regions.h $(TODO_DRIVER_CORE) labs/common/runfiles/json.h labs/command/grade/sandbox.h
	@mkdir -p $(@D)
	$(call quiet,LD,$@)$(CC) -Ilabs $(BASE) $(CFLAGS) -Itests/todo tests/todo/driver.c tests/todo/regions.c $(TODO_DRIVER_CORE) -o $@ -lm

$(SANDBOX): labs/command/grade/sandbox_cmd.c labs/command/grade/sandbox.c labs/command/grade/sandbox.h labs/common/harness/check.c labs/common/harness/check.h
	@mkdir -p $(@D)
	$(call quiet,LD,$@)$(CC) -Ilabs $(BASE) $(CFLAGS) labs/command/grade/sandbox_cmd.c labs/command/grade/sandbox.c labs/common/harness/check.c -o $@

# The course in the browser: http://127.0.0.1:8080 (the URL to open, with its token, is printed).
# Each lab's page checks the TODO regions of LABS (default labs/, this copy) with make check's
# programs, built first (check-programs).
web: deps $(SHARDLAB) $(LAB_BINS) $(REF_BINS) check-programs
	$(SHARDLAB) web $(if $(PORT),--port $(PORT)) --checks $(GRADE_BUILD)/todo

# One lexicon entry in the terminal (TERM=zero-stage-3), or the index without TERM. Only a
# TERM given on the command line counts: the environment's TERM is the terminal's type.
LEXICON_TERM = $(if $(filter command line,$(origin TERM)),$(TERM))
lexicon: $(SHARDLAB)
	$(SHARDLAB) lexicon $(if $(LEXICON_TERM),"$(LEXICON_TERM)")

# One lesson in the terminal, by number or name (N=5, N=ddp-from-scratch), or the list without N.
.PHONY: lesson
lesson: $(SHARDLAB)
	$(SHARDLAB) lesson $(if $(N),"$(N)")

# The terminal dashboard on RUN (default: the newest run under runs/).
tui: $(SHARDLAB)
	$(SHARDLAB) tui $(RUN)

bench-single: $(BUILD)/bench/bench_single
	$(BUILD)/bench/bench_single $(ARGS)

# DDP on NGPU ranks against single on the same global batch: step time and the ratio.
bench-ddp: $(BUILD)/labs/single $(BUILD)/labs/ddp
	BUILD=$(BUILD) sh tests/bench/bench_ddp.sh $(NGPU) $(or $(STEPS),100)

# Each ZeRO stage and FSDP (with and without prefetch) against DDP, N=2 and 4: step time ratio, peak memory.
bench-zero: $(BUILD)/labs/ddp $(BUILD)/labs/zero $(BUILD)/labs/fsdp
	BUILD=$(BUILD) sh tests/bench/bench_zero.sh $(or $(STEPS),60) $(ARGS)

# TP (and --sp) and each pipeline schedule against single, N=2 and 4: step time ratio, bubble.
bench-parallel: $(BUILD)/labs/single $(BUILD)/labs/tp $(BUILD)/labs/pp
	BUILD=$(BUILD) sh tests/bench/bench_parallel.sh $(or $(STEPS),40) $(ARGS)

# Context parallelism's layouts side by side, N=2 and 4: attention's max/min over the ranks,
# the ring's hidden share, step time.
bench-cp: $(BUILD)/labs/cp
	BUILD=$(BUILD) sh tests/bench/bench_cp.sh $(or $(STEPS),30) $(ARGS)

# shardlab web against nginx serving the same rendered page (wrk): requests/s side by side.
bench-web: $(SHARDLAB)
	BUILD=$(BUILD) sh tests/bench/bench_web.sh $(or $(SECS),10)

# The same run with and without the dashboard watching: step time side by side, and the ratio.
bench-tui: $(BUILD)/labs/ddp $(SHARDLAB)
	BUILD=$(BUILD) sh tests/bench/bench_tui.sh $(NGPU) $(or $(STEPS),500)

# shardlab's all-reduce (COLL=all_to_all: its all-to-all) against Open MPI's (installed on
# demand), N=2 and 4, with the ratio.
bench-collectives: $(BUILD)/labs/collectives $(BUILD)/bench/memcpy_bw
	BUILD=$(BUILD) COLL=$(or $(COLL),all_reduce) sh tests/bench/bench_collectives.sh

# The reference labs as the READMEs run them, at 200 and 1000 steps, graded: full marks or exit 1.
grade-sweep: all
	BUILD=$(BUILD) sh tests/bench/grade_sweep.sh $(if $(LENGTHS),"$(LENGTHS)")

# The GPU validation (tests/gpu/check.sh): on a machine with a GPU, every lab on CUDA against
# the CPU, the kernels against the CPU's, a step against PyTorch. Without a GPU it says so.
gpu-check:
	BUILD=$(BUILD) sh tests/gpu/check.sh

# shardlab and PyTorch on one GPU (tests/gpu/bench.sh, which builds build/labs/single first):
# ms per step and peak memory at the labs' default and GPT-2 small's shapes, fp32, TF32 and
# bf16, with the ratios. Without a GPU it says so and exits 0. SHAPES=, ROWS=, PRECISIONS=.
bench-gpu:
	BUILD=$(BUILD) sh tests/gpu/bench.sh

# Where a step's GPU time goes (tests/gpu/profile.sh): every kernel of one step of single on
# CUDA, timed by Nsight Compute (ncu), summed by kernel and kind, beside the step without the
# profiler. Without a GPU or ncu it says so and exits 0. SHAPE=, PRECISIONS=, LAB_ARGS=, STEP=.
profile-gpu:
	BUILD=$(BUILD) sh tests/gpu/profile.sh

# ---- test -----------------------------------------------------------------------------
# Unit tests run sanitized; lab tests run the optimized labs (to train in seconds) and the
# sanitized ones on short runs.
GPU_TESTS := $(if $(CUDA_BUILD),$(BUILD)/gpu/test_cuda_ops $(BUILD)/gpu/bench_ops)
# The C benchmarks are built (not run) so that they keep compiling with the code they time.
BENCH_BINS := $(BUILD)/bench/bench_single $(BUILD)/bench/memcpy_bw
# What the tests run, built (make -j N test-programs builds it on N cores; .ci/run does).
test-programs: all $(TEST_BINS) $(LAB_SAN) $(REF_SAN) $(BREAK_BINS) $(SHARDLAB_SAN) $(BUILD)/san/fixtures/ranklab $(GPU_TESTS) $(BENCH_BINS)
test: deps deps-browser test-programs
	@$(if $(HAVE_CXX),,echo "test_flash_tc, test_hash_kernel, test_ring_kernels: left out: no C++ compiler ($(CXX)); install g++ to run the CUDA kernels emulated";)
	@$(if $(CUDA_BUILD),,echo "test_cuda_ops: left out: this build has no CUDA backend ($(CUDA_STATUS))";)
	@BUILD=$(BUILD) sh tests/run.sh

# The figures the READMEs, lessons/ and lexicon/ quote from runs, regenerated (tests/test_figures.c,
# which make test runs to hold them): each command they name runs once in a scratch copy of
# the checkout, and every output block or registered figure that differs from what it prints
# now is rewritten in place, for a person to review with git diff. DOC=<file>: that one alone.
# It prints each command as it runs, then what it rewrote and what it could not (its checks'
# "ok" lines are left out); the exit status is the test's.
docs-figures: all $(BUILD)/san/tests/test_figures
	@{ $(BUILD)/san/tests/test_figures . --write $(if $(DOC),--only $(DOC)); echo "exit $$?"; } | \
	  awk '/^exit [0-9]+$$/ { status = $$2; next } !/^ok / { print; fflush() } END { exit status }'

clean:
	rm -rf $(BUILD)
