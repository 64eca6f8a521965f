#!/usr/bin/env bash
# scripts/gpu_check.sh's two halves on this machine: pack gathers every GPU test binary with its
# libraries, and run starts each one through the bundled loader (what the device machine does).
# Without a GPU every test reports skipped: accepted with GPU_CHECK_ALLOW_SKIP, a failure
# without it (on a GPU machine nothing may skip). The model checks run on the CPU.
set -euo pipefail
repo=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GPU_CHECK_BUNDLE=$tmp/bundle BUILD_DIR=$build OUT=$tmp/out
GPU_CHECK_SKIP_BUILD=1 "$repo/scripts/gpu_check.sh" pack
test -x "$tmp/bundle/lib/ld-linux-x86-64.so.2"
count=0
for b in "$tmp"/bundle/bin/*; do count=$((count + 1)); done
((count >= 3)) || { echo "only $count GPU test binaries packed" >&2; exit 1; }
# The model checks run on the CPU here (GPU_CHECK_DEVICE=cpu): the same commands and comparisons.
# The real-dimension timing runs on the checkpoint's toy-size twin.
GPU_CHECK_ALLOW_SKIP=1 GPU_CHECK_DEVICE=cpu GPU_CHECK_REAL_DIMS=test GPU_CHECK_PYTHON=/usr/bin/python3 \
  GPU_CHECK_REAL_DIMS_DIR="$tmp/real-dims" "$repo/scripts/gpu_check.sh" run
grep -q 'decode_tok/s' "$OUT/real_dims.txt"
grep -q 'run=prompt0 .* PASS' "$OUT/golden_fp8.txt"
test -s "$OUT/generate_cpu_dspark.txt"
test -s "$OUT/sampled_cpu_dspark.txt"
test -s "$OUT/graphs_cpu_dspark.txt"
test -x "$tmp/bundle/tools/pdspark"
for b in "$tmp"/bundle/bin/*; do
  # Each binary started and wrote its report: it loaded through the bundle.
  grep -q '<testsuites' "$OUT/$(basename "$b").xml"
done
if ! command -v nvidia-smi >/dev/null; then
  if "$repo/scripts/gpu_check.sh" run; then
    echo "run passed although every test was skipped" >&2
    exit 1
  fi
fi
echo "gpu_check pack/run: $count binaries" >&2
