# Thin wrapper over CMake. `make run` serves the bundled tiny model; `make test` runs every test.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
  CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
endif
MODEL ?= models/tiny-dsv4-dspark


.PHONY: all bootstrap configure build test run format lint fuzz bench tiny-model clean

all: build

bootstrap:
	@scripts/bootstrap.sh

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

run: build
	@scripts/run_local.sh $(MODEL)

bench: build
	@scripts/run_benchmarks.sh

format:
	@git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

lint: build
	@git diff --name-only --diff-filter=AM HEAD~1 -- '*.cc' | xargs -r clang-tidy -p $(BUILD_DIR) --quiet

fuzz: bootstrap
	@scripts/fuzz.sh

tiny-model: bootstrap
	@tools/train/train_all.sh

clean:
	@rm -rf $(BUILD_DIR)
