#!/usr/bin/env bash
# The GPU checks (issue 23), in two halves: the device machine has the CUDA toolkit and driver
# but none of the Debian packages the build needs (abseil, gRPC, GoogleTest, spdlog) and cannot
# fetch them, so the build happens here and travels.
#
#   scripts/gpu_check.sh pack   On the development machine: builds (CUDA on), then gathers every
#                               GPU test binary, stripped, with each shared library it loads
#                               (glibc and its loader included, so the device's own glibc does
#                               not matter) into .gpu_bundle/ (git-ignored; about 10 MiB).
#   scripts/gpu_check.sh run    On the device machine, in the repository root, .gpu_bundle
#                               carried: device facts, then every GPU test. Logs and GoogleTest
#                               XML go to $OUT (or gpu_check_out/). Fails if any test fails or
#                               reports skipped (on a GPU machine nothing may skip). Then the
#                               model on the GPU (model_checks: golden-check, greedy tokens with
#                               and without DSpark equal to the CPU's), then the GPU benchmarks
#                               (BENCHES), their tables to $OUT/NAME.md, then prefill and decode
#                               at batch 1/16/64 on the real-dimension checkpoint against the HBM
#                               bound (real_dims_timing, when the device has numpy and the time).
#
# With the device tool: run(command="scripts/gpu_check.sh run", carry=[".gpu_bundle"],
# timeout_s=540).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${GPU_CHECK_BUNDLE:-.gpu_bundle}
BUILD_DIR=${BUILD_DIR:-build}
# The GPU benchmarks run after the tests; each prints a markdown table (docs/perf.md).
BENCHES=(pdspark_cuda_gemm_bench)
# The device the model checks put the model on (cpu: how the script's own test runs them here).
DEVICE=${GPU_CHECK_DEVICE:-cuda}

log() { echo "gpu_check: $*" >&2; }

# Copies binary $1 into folder $2, stripped, and every library the loader resolves for it into
# lib/, but the driver's libcuda (the device's own), NCCL (200 MB) and cuBLAS/cuBLASLt (600 MB):
# the device image has those two from its nvidia-nccl and nvidia-cublas pip packages.
add_binary() {
  strip --strip-debug -o "$2/$(basename "$1")" "$1"
  ldd "$1" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' | grep -v -e libcuda -e libnccl -e libcublas |
    while read -r lib; do cp -nL "$lib" "$BUNDLE/lib/"; done
}

pack() {
  [[ -x /usr/local/cuda/bin/nvcc ]] || { log "no nvcc under /usr/local/cuda: nothing to pack"; exit 1; }
  [[ -n ${GPU_CHECK_SKIP_BUILD:-} ]] || make build >&2
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  # Every binary of a test labelled gpu (tests/**/CMakeLists.txt).
  local binaries
  mapfile -t binaries < <(cd "$BUILD_DIR" && ctest -L '^gpu$' --show-only=json-v1 | python3 -c '
import json, sys
print("\n".join(sorted({t["command"][0] for t in json.load(sys.stdin)["tests"] if t.get("command")})))')
  ((${#binaries[@]} > 0)) || { log "no GPU tests registered in $BUILD_DIR (was nvcc found?)"; exit 1; }
  mkdir -p "$BUNDLE/bench" "$BUNDLE/tools"
  for b in "${binaries[@]}"; do add_binary "$b" "$BUNDLE/bin"; done
  for b in "${BENCHES[@]}"; do add_binary "$BUILD_DIR/bin/$b" "$BUNDLE/bench"; done
  add_binary "$BUILD_DIR/bin/pdspark" "$BUNDLE/tools"
  add_binary "$BUILD_DIR/bin/pdspark_model_bench" "$BUNDLE/tools"
  log "packed ${#binaries[@]} test binaries, ${#BENCHES[@]} benchmarks," \
    "$(ls "$BUNDLE/lib" | wc -l) libraries," \
    "$(du -sh "$BUNDLE" | cut -f1) in $BUNDLE"
}

# Runs a bundled binary with the bundled loader and libraries; the driver (libcuda) is found
# through the device's loader cache and its usual folders, NCCL and cuBLASLt in the device's
# Python packages (or its CUDA toolkit).
bundled() {
  local lib nccl cublas
  lib=$(realpath "$BUNDLE/lib")
  nccl=$(python3 -c 'import nvidia.nccl as n; print(n.__path__[0] + "/lib")' 2>/dev/null || true)
  cublas=$(python3 -c 'import nvidia.cublas as n; print(n.__path__[0] + "/lib")' 2>/dev/null || true)
  "$lib/ld-linux-x86-64.so.2" --library-path \
    "$lib:${nccl:+$nccl:}${cublas:+$cublas:}/usr/local/cuda/lib64:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu:/usr/lib64" \
    "$@"
}

# The model on $DEVICE: golden-check of the golden set with both KV-cache dtypes, and greedy
# generation on the bundled model on the CPU and on $DEVICE, with and without DSpark, and on
# $DEVICE with CUDA graphs: all six must give the same tokens; seeded sampling on $DEVICE with
# and without DSpark: the same tokens too. Output to $1.
model_checks() {
  local out=$1 pdspark="$BUNDLE/tools/pdspark" failed=0 first=""
  for dtype in auto fp8; do
    log "golden-check --device $DEVICE --kv-cache-dtype $dtype"
    if ! bundled "$pdspark" golden-check --golden tests/data/golden/dsv4-tiny-a --device "$DEVICE" \
      --kv-cache-dtype "$dtype" >"$out/golden_$dtype.txt" 2>"$out/golden_$dtype.log"; then
      log "FAILED: golden-check ($dtype): $(tail -n 2 "$out/golden_$dtype.log")"; failed=1
    fi
    cat "$out/golden_$dtype.txt" >&2
  done
  for device in cpu "$DEVICE"; do
    for spec in none dspark; do
      local name="generate_${device}_$spec"
      if ! bundled "$pdspark" generate --model models/tiny-dsv4-dspark --max-tokens 48 \
        --prompt "Once upon a time, in a small village," --ignore-eos --device "$device" \
        --spec-method "$spec" >"$out/$name.txt" 2>"$out/$name.log"; then
        log "FAILED: $name: $(tail -n 2 "$out/$name.log")"; failed=1; continue
      fi
      log "$name: $(tail -n 1 "$out/$name.log")"
      if [[ -z $first ]]; then
        first=$name
      elif ! cmp -s "$out/$first.txt" "$out/$name.txt"; then
        log "FAILED: $name's greedy text differs from $first's"; failed=1
      fi
    done
  done
  # Seeded sampling with DSpark under coupled acceptance (the GPU default, docs/dspark.md): its
  # text must be plain sampling's.
  for spec in none dspark; do
    local name="sampled_${DEVICE}_$spec"
    if ! bundled "$pdspark" generate --model models/tiny-dsv4-dspark --max-tokens 48 \
      --prompt "Once upon a time, in a small village," --ignore-eos --device "$DEVICE" \
      --temperature 0.8 --seed 7 --spec-method "$spec" --spec-acceptance coupled \
      >"$out/$name.txt" 2>"$out/$name.log"; then
      log "FAILED: $name: $(tail -n 2 "$out/$name.log")"; failed=1
    fi
    log "$name: $(tail -n 1 "$out/$name.log")"
  done
  if ! cmp -s "$out/sampled_${DEVICE}_none.txt" "$out/sampled_${DEVICE}_dspark.txt"; then
    log "FAILED: seeded sampling with DSpark on $DEVICE differs from plain sampling"; failed=1
  fi
  # CUDA graphs change no bit: greedy text with and without DSpark equal to the first run's;
  # the log's last line counts the launches replayed from graphs.
  for spec in none dspark; do
    local name="graphs_${DEVICE}_$spec"
    if ! bundled "$pdspark" generate --model models/tiny-dsv4-dspark --max-tokens 48 \
      --prompt "Once upon a time, in a small village," --ignore-eos --device "$DEVICE" \
      --spec-method "$spec" --cuda-graphs >"$out/$name.txt" 2>"$out/$name.log"; then
      log "FAILED: $name: $(tail -n 2 "$out/$name.log")"; failed=1; continue
    fi
    log "$name: $(grep -h 'cuda graphs' "$out/$name.log" | tail -n 1)"
    if ! cmp -s "$out/$first.txt" "$out/$name.txt"; then
      log "FAILED: $name's greedy text differs from $first's"; failed=1
    fi
  done
  return $failed
}

# Prefill and decode at batch 1/16/64 on the real-dimension checkpoint (13 GB, written by
# bench/make_real_dims_checkpoint.py within GPU_CHECK_REAL_DIMS_S seconds) on $DEVICE, exact and
# fast kernels side by side, each against the device's copy bandwidth: a timing, so only a crash
# fails the check. GPU_CHECK_REAL_DIMS=test writes the checkpoint's toy-size twin instead;
# GPU_CHECK_PYTHON names a python3 with numpy.
real_dims_timing() {
  local out=$1 dir=${GPU_CHECK_REAL_DIMS_DIR:-build/real-dims}
  local python=${GPU_CHECK_PYTHON:-python3}
  if ! "$python" -c 'import numpy' 2>/dev/null; then
    log "not timing the real-dimension checkpoint: $python has no numpy"; return 0
  fi
  if [[ ! -f $dir/config.json ]] && ! timeout "${GPU_CHECK_REAL_DIMS_S:-150}" "$python" \
    bench/make_real_dims_checkpoint.py --out "$dir" --dims "${GPU_CHECK_REAL_DIMS:-real}" \
    2>"$out/real_dims_make.log"; then
    log "not timing the real-dimension checkpoint: writing it failed or took too long" \
      "($(tail -n 1 "$out/real_dims_make.log"))"; return 0
  fi
  log "pdspark_model_bench on the real-dimension checkpoint, --device $DEVICE"
  if ! bundled "$BUNDLE/tools/pdspark_model_bench" --model "$dir" --device "$DEVICE" \
    --batch 1,16,64 --prefill-len 64 --decode-steps 8 --kernels exact,fast \
    >"$out/real_dims.txt" 2>"$out/real_dims.log"; then
    log "FAILED: pdspark_model_bench: $(tail -n 2 "$out/real_dims.log")"; return 1
  fi
  cat "$out/real_dims.log" "$out/real_dims.txt" >&2
  # The fast kernels again with CUDA graphs (where there is a GPU: on the CPU they change
  # nothing): against the table above's fast rows.
  [[ $DEVICE == cpu ]] && return 0
  log "pdspark_model_bench on the real-dimension checkpoint, --cuda-graphs on"
  if ! bundled "$BUNDLE/tools/pdspark_model_bench" --model "$dir" --device "$DEVICE" \
    --batch 1,16,64 --prefill-len 64 --decode-steps 8 --kernels fast --cuda-graphs on \
    >"$out/real_dims_graphs.txt" 2>"$out/real_dims_graphs.log"; then
    log "FAILED: pdspark_model_bench --cuda-graphs on: $(tail -n 2 "$out/real_dims_graphs.log")"
    return 1
  fi
  cat "$out/real_dims_graphs.log" "$out/real_dims_graphs.txt" >&2
}

run() {
  [[ -d $BUNDLE/bin ]] || { log "no $BUNDLE: run 'scripts/gpu_check.sh pack' here and carry it"; exit 1; }
  local out=${OUT:-gpu_check_out}
  mkdir -p "$out"
  { nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
      --format=csv || log "nvidia-smi failed"; } | tee "$out/device.txt" >&2
  local failed=0
  for b in "$BUNDLE"/bin/*; do
    local name; name=$(basename "$b")
    log "running $name"
    if ! bundled "$b" --gtest_output="xml:$out/$name.xml" >"$out/$name.log" 2>&1; then
      log "FAILED: $name (log: $name.log)"; failed=1
    fi
    # The run's count, and each failed test by name.
    grep -E '^\[==========\] .* ran|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+ tests?,|^\[  FAILED  \] [A-Z]' \
      "$out/$name.log" | sort -u >&2 || true
    if grep -q '^\[  SKIPPED \]' "$out/$name.log" && [[ -z ${GPU_CHECK_ALLOW_SKIP:-} ]]; then
      log "FAILED: $name skipped tests on a machine that should have a GPU"; failed=1
    fi
  done
  if [[ $DEVICE == cpu || -z ${GPU_CHECK_ALLOW_SKIP:-} ]]; then
    model_checks "$out" || failed=1
  else
    log "not running the model checks: GPU_CHECK_ALLOW_SKIP says there is no GPU here"
  fi
  for b in "${BENCHES[@]}"; do
    if [[ -n ${GPU_CHECK_ALLOW_SKIP:-} ]]; then
      log "not running $b: GPU_CHECK_ALLOW_SKIP says there is no GPU here"; continue
    fi
    log "running $b"
    if ! bundled "$BUNDLE/bench/$b" >"$out/$b.md" 2>"$out/$b.log"; then
      log "FAILED: $b: $(tail -n 1 "$out/$b.log")"; failed=1
    fi
    cat "$out/$b.md" >&2
  done
  if [[ $DEVICE == cpu || -z ${GPU_CHECK_ALLOW_SKIP:-} ]]; then
    real_dims_timing "$out" || failed=1
  fi
  ((failed == 0)) && log "all GPU tests and benchmarks passed" || log "some GPU checks failed"
  return $failed
}

case ${1:-} in
  pack) pack ;;
  run) run ;;
  *) echo "usage: scripts/gpu_check.sh pack|run (see the comment at its top)" >&2; exit 2 ;;
esac
