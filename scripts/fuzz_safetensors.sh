#!/usr/bin/env bash
# Fuzzes the safetensors header parser with libFuzzer + AddressSanitizer for a bounded time.
#
#   scripts/fuzz_safetensors.sh [SECONDS]      (default 30)
#
# Configures a separate clang build dir (build-fuzz, or $BUILD_DIR) with PDSPARK_BUILD_FUZZERS=ON,
# instruments the library too (-fsanitize=address,fuzzer-no-link), seeds the corpus from the
# golden checkpoint's headers and keeps the grown corpus in build-fuzz/fuzz/corpus between runs.
# Exits non-zero when the fuzzer finds a crash; the reproducer lands in build-fuzz/fuzz/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_RUN="${1:-30}"
BUILD="${BUILD_DIR:-$ROOT/build-fuzz}"
JOBS="${JOBS:-2}"
GOLDEN="$ROOT/tests/data/golden/dsv4-tiny-a"

pick() { for c in "$@"; do command -v "$c" >/dev/null 2>&1 && { echo "$c"; return; }; done; }
CC_BIN="${CC:-$(pick clang-14 clang)}"
CXX_BIN="${CXX:-$(pick clang++-14 clang++)}"
if [[ -z "$CC_BIN" || -z "$CXX_BIN" ]]; then
  echo "fuzz_safetensors: clang not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

cmake -S "$ROOT" -B "$BUILD" \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer" \
  -DPDSPARK_BUILD_FUZZERS=ON -DPDSPARK_BUILD_TESTS=ON -DPDSPARK_ENABLE_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target safetensors_header_fuzzer

FUZZ="$BUILD/fuzz"
SEEDS="$FUZZ/seeds"
CORPUS="$FUZZ/corpus"
mkdir -p "$SEEDS" "$CORPUS"

# Seeds: the length prefix + header of every golden file (the fuzzer also parses each header
# against a large virtual data section, so header-only seeds reach the per-tensor checks), plus
# one small complete file.
for f in "$GOLDEN"/*.safetensors; do
  len="$(od -An -t u8 -N8 "$f" | tr -d ' ')"  # little-endian host assumed (x86-64, aarch64)
  head -c "$((8 + len))" "$f" >"$SEEDS/$(basename "$f" .safetensors).header"
done
header='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}'
{
  printf "\\x$(printf %02x "${#header}")\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
  printf '%s' "$header"
  printf '\x00\x00\x80\x3f\x00\x00\x00\x40'
} >"$SEEDS/small.safetensors"

cd "$FUZZ"  # crash-* / leak-* reproducers are written here
exec ./safetensors_header_fuzzer -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 \
  -rss_limit_mb=4096 -print_final_stats=1 "$CORPUS" "$SEEDS"
