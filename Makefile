# Thin wrapper over CMake. `make run` serves the bundled tiny model; `make test` runs every test.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# ccache is CMake's to find (CMakeLists.txt), at configure time, after the bootstrap installed
# it: found here, when make starts, the first command on a fresh machine would configure without
# it and the second with it, rebuilding everything.
CMAKE_FLAGS ?=
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
