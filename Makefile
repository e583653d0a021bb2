# HeteroFlow — the two commands of README.md, and the rest.
#   make run    install what is missing, build, start hf-server + a local node
#   make test   install what is missing, build, run every test (incl. TSan)
#   make bench  build and run every benchmark; JSON in build/bench-results/
#   make fuzz   run every fuzz target FUZZ_SECONDS (60) each (docs/FUZZING.md)
SHELL := /bin/bash
BUILD ?= build
TSAN_BUILD ?= build-tsan
ASAN_BUILD ?= build-asan
GENERATOR := -G Ninja
CMAKE_FLAGS ?=
# The ASan + UBSan tree is built with clang, so the fuzz targets (libFuzzer
# is clang's) and the core tests share its objects: `make test` builds the
# fuzz targets there, and CI's `make test-asan` reuses what it compiled.
ASAN_CC ?= clang-14
ASAN_CXX ?= clang++-14
# It is built at -O0 (ASAN_OPT): clang with ASan takes about twice as long
# at -O1, and only the code the property tests drive hard runs much slower
# at -O0 (it stays at -O1: hf_keep_optimised in cmake/HeteroflowHelpers.cmake).
# `make fuzz ASAN_OPT=-O1` for long fuzzing runs (the tree is rebuilt).
ASAN_OPT ?= -O0
ASAN_FLAGS := -DCMAKE_C_COMPILER=$(ASAN_CC) -DCMAKE_CXX_COMPILER=$(ASAN_CXX) \
    -DHF_SANITIZE=address -DHF_SANITIZE_OPT=$(ASAN_OPT) -DHF_FUZZ=ON \
    -DHF_BUILD_BENCH=OFF -DHF_BUILD_CONSOLE=OFF
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
# Tests run side by side, one per core (they take their own ports and
# temporary directories; many spend their time waiting on processes).
TEST_JOBS ?= $(shell nproc)

.PHONY: all deps configure build run demo test test-tsan test-asan test-fuzz \
        asan-configure fuzz bench format format-check tidy tidy-sources clean soak \
        mutations

all: build

deps:
	@scripts/bootstrap.sh

configure: deps
	@cmake -S . -B $(BUILD) $(GENERATOR) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD)

run: build
	@BUILD=$(BUILD) scripts/run-local.sh

# The ledger walk-through of a small mixed cluster (no server).
demo: build
	$(BUILD)/src/demo/hf-demo --cluster configs/demo-cluster.json

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 1200 -j $(TEST_JOBS)
	@$(MAKE) --no-print-directory test-tsan
	@$(MAKE) --no-print-directory test-fuzz

# The concurrency tests again under ThreadSanitizer (label "tsan").
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) $(GENERATOR) -DHF_SANITIZE=thread \
	    -DHF_BUILD_BENCH=OFF -DHF_BUILD_CONSOLE=OFF >/dev/null
	@cmake --build $(TSAN_BUILD) --target tsan_tests
	cd $(TSAN_BUILD) && ctest --output-on-failure -L tsan

# The clang ASan + UBSan tree (a tree configured with another compiler is
# reconfigured from scratch).
asan-configure: deps
	@if [ -f $(ASAN_BUILD)/CMakeCache.txt ] && \
	    ! grep -q '^CMAKE_CXX_COMPILER:.*clang' $(ASAN_BUILD)/CMakeCache.txt; then \
	  echo "$(ASAN_BUILD): configured with another compiler; reconfiguring"; \
	  rm -rf $(ASAN_BUILD)/CMakeCache.txt $(ASAN_BUILD)/CMakeFiles; \
	fi
	@cmake -S . -B $(ASAN_BUILD) $(GENERATOR) $(ASAN_FLAGS) >/dev/null

# The core (ledger, scheduler) tests under ASan + UBSan (label "core").
test-asan: asan-configure
	@cmake --build $(ASAN_BUILD) --target core_tests
	cd $(ASAN_BUILD) && ctest --output-on-failure -L core --timeout 1800 \
	    -j $(TEST_JOBS)

# Each fuzz target over its seed corpus plus a few seconds of mutations
# (label "fuzz"; part of `make test`).
test-fuzz: asan-configure
	@cmake --build $(ASAN_BUILD) --target fuzz_targets
	cd $(ASAN_BUILD) && ctest --output-on-failure -L fuzz -j $(TEST_JOBS)

# Every fuzz target (or FUZZ_TARGETS) for FUZZ_SECONDS each; a finding's
# reproducer is kept in build-asan/fuzz-findings/ and fails the run.
fuzz: asan-configure
	@cmake --build $(ASAN_BUILD) --target fuzz_targets
	@scripts/fuzz.sh --seconds $(FUZZ_SECONDS) $(ASAN_BUILD) $(FUZZ_TARGETS)

# Every *_bench binary, each writing build/bench-results/<name>.json.
# OPENB_DIR: the openb trace's CSVs for sim_bench (HF_OPENB_DIR).
OPENB_DIR ?= $(HF_OPENB_DIR)
bench: build
	@mkdir -p $(BUILD)/bench-results
	@export HF_OPENB_DIR="$(OPENB_DIR)"; set -e; for b in $$(find $(BUILD)/bench -maxdepth 2 -type f -name '*_bench' -perm -u+x | sort); do \
	  name=$$(basename $$b); echo "== $$name"; \
	  $$b --benchmark_out=$(BUILD)/bench-results/$$name.json \
	      --benchmark_out_format=json; \
	done
	@echo "== hook_shares"
	@$(BUILD)/src/hook/hook_shares --hook $(BUILD)/lib/libhfhook.so \
	    --worker $(BUILD)/src/hook/share_worker \
	    --fake-cuda-dir $(BUILD)/src/hook/testing/fake-cuda \
	    --out $(BUILD)/bench-results/hook_shares.json
	@echo "results: $(BUILD)/bench-results/"

# The whole-system simulation for as long as you like (docs/SIMULATION.md):
# SOAK_SEEDS seeds from SOAK_SEED, SOAK_STEPS steps with faults each; prints
# each seed's outcome and the steps per second.
SOAK_SEED ?= 1000
SOAK_SEEDS ?= 100
SOAK_STEPS ?= 5000
soak: build
	$(BUILD)/src/simulation/hf-simulate --seed $(SOAK_SEED) --seeds $(SOAK_SEEDS) \
	    --steps $(SOAK_STEPS) --jobs $$(nproc)

# Puts each hole of tests/mutations/catalogue.py back and checks that the
# simulation or its regression test catches it (build/mutations.json).
mutations: deps
	scripts/mutations.py

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

format-check:
	@git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

# clang-tidy (.clang-tidy) on the project's sources, tests excluded, with
# Clang's thread-safety analysis of the lock annotations
# (src/common/thread_annotations.h): the build's GCC cannot check them. Any
# finding fails. The build's GCC-only warning options (-Wno-restrict) are
# unknown to Clang: not a finding.
TIDY_FLAGS := --quiet --warnings-as-errors='*' --extra-arg=-Wthread-safety \
              --extra-arg=-Wno-unknown-warning-option
tidy: configure
	@$(MAKE) --no-print-directory tidy-sources

# clang-tidy over the sources on $(BUILD) as configured (no configure step:
# CI runs it beside `make test`, which configures the same tree).
tidy-sources:
	@git ls-files 'src/*.cc' | grep -v '_test\.cc$$' | \
	    xargs -P $$(nproc) -n 4 clang-tidy -p $(BUILD) $(TIDY_FLAGS)

clean:
	rm -rf $(BUILD) $(TSAN_BUILD) $(ASAN_BUILD)
