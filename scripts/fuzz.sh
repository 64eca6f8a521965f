#!/usr/bin/env bash
# Runs every libFuzzer target (AddressSanitizer) for a bounded time each:
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, all targets)
#
#   safetensors_header_fuzzer  the safetensors header parser      (tests/common/safetensors)
#   openai_request_fuzzer      HTTP body -> request mapping, chat template, response JSON
#   tokenizer_fuzzer           encode/decode round trip, streaming detokenizer invariant
#   model_config_fuzzer        config.json parsing and validation  (tests/fuzz)
#
# Configures a clang build dir (build-fuzz, or $BUILD_DIR) with PDSPARK_BUILD_FUZZERS=ON and the
# libraries instrumented (-fsanitize=address,fuzzer-no-link); seeds each corpus from files in
# the repository; keeps the grown corpora in build-fuzz/fuzz/corpus/<target> between runs.
# Prints one "fuzz-summary target=... execs=... crashes=..." line per target. Exits 77 when
# clang or libFuzzer (libclang-rt-14-dev) is missing, 1 when a target found a crash (the
# reproducer is build-fuzz/fuzz/crash-*), 0 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(safetensors_header_fuzzer openai_request_fuzzer
                                        tokenizer_fuzzer model_config_fuzzer)
BUILD="${BUILD_DIR:-$ROOT/build-fuzz}"
JOBS="${JOBS:-2}"

pick() { for c in "$@"; do command -v "$c" >/dev/null 2>&1 && { echo "$c"; return; }; done; }
CC_BIN="${CC:-$(pick clang-14 clang)}"
CXX_BIN="${CXX:-$(pick clang++-14 clang++)}"
if [[ -z "$CC_BIN" || -z "$CXX_BIN" ]]; then
  echo "fuzz: clang not found (apt-get install clang libclang-rt-14-dev); skipped" >&2
  exit 77
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' |
    "$CXX_BIN" -x c++ -fsanitize=fuzzer,address -o /dev/null - >/dev/null 2>&1; then
  echo "fuzz: $CXX_BIN cannot link libFuzzer (apt-get install libclang-rt-14-dev); skipped" >&2
  exit 77
fi

CCACHE="$(command -v ccache || true)"
echo "fuzz: configuring $BUILD with $CXX_BIN"
cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  ${CCACHE:+-DCMAKE_CXX_COMPILER_LAUNCHER="$CCACHE" -DCMAKE_C_COMPILER_LAUNCHER="$CCACHE"} \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer" \
  -DPDSPARK_BUILD_FUZZERS=ON -DPDSPARK_BUILD_TESTS=ON -DPDSPARK_ENABLE_CUDA=OFF >/dev/null
echo "fuzz: building ${TARGETS[*]}"
cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"

FUZZ="$BUILD/fuzz"
seed() {  # seed TARGET NAME CONTENT
  mkdir -p "$FUZZ/seeds/$1"
  printf '%s' "$3" >"$FUZZ/seeds/$1/$2"
}
seed_files() {  # seed_files TARGET PREFIX_BYTE FILE...
  local target=$1 prefix=$2
  shift 2
  mkdir -p "$FUZZ/seeds/$target"
  for f in "$@"; do
    { printf '%s' "$prefix"; cat "$f"; } >"$FUZZ/seeds/$target/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
}

make_seeds() {
  local golden="$ROOT/tests/data/golden/dsv4-tiny-a"
  # safetensors: each golden file's length prefix + header, and one small complete file.
  mkdir -p "$FUZZ/seeds/safetensors_header_fuzzer"
  for f in "$golden"/*.safetensors; do
    local len
    len="$(od -An -t u8 -N8 "$f" | tr -d ' ')"  # little-endian host assumed (x86-64, aarch64)
    head -c "$((8 + len))" "$f" >"$FUZZ/seeds/safetensors_header_fuzzer/$(basename "$f" .safetensors).header"
  done
  local header='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}'
  {
    printf "\\x$(printf %02x "${#header}")\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
    printf '%s' "$header"
    printf '\x00\x00\x80\x3f\x00\x00\x00\x40'
  } >"$FUZZ/seeds/safetensors_header_fuzzer/small.safetensors"
  # openai: first byte even = completions, odd = chat.
  seed openai_request_fuzzer completion '0{"model":"m","prompt":"Hello","max_tokens":16,"temperature":0.7,"top_p":0.9,"stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true},"seed":3}'
  seed openai_request_fuzzer tokens '0{"prompt":[0,17,99],"max_tokens":4,"stop_token_ids":[1],"ignore_eos":true,"min_tokens":2,"top_k":5,"min_p":0.1}'
  seed openai_request_fuzzer chat '1{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]},{"role":"assistant","content":"Hello","reasoning_content":"r"},{"role":"user","content":"more"}],"max_completion_tokens":8,"chat_template_kwargs":{"thinking":true}}'
  seed openai_request_fuzzer bad '0{"prompt":"x","logprobs":5,"n":2,"echo":true}'
  # tokenizer: first byte even = text, odd = token ids.
  seed tokenizer_fuzzer text $'0ROMEO:\nBut soft, what light through yonder window breaks? 🙂 été 東京 <｜begin▁of▁sentence｜>'
  seed tokenizer_fuzzer ids $'1\x41\x00\x42\x00\xff\x0f\x00\x01\x10\x00'
  # config: the repository's configs.
  seed_files model_config_fuzzer '' "$ROOT/models/tiny-dsv4-dspark/config.json" "$golden/config.json"
}
make_seeds

status=0
cd "$FUZZ"  # crash-* / leak-* reproducers are written here
for target in "${TARGETS[@]}"; do
  corpus="$FUZZ/corpus/$target"
  mkdir -p "$corpus"
  dict=()
  [[ -f "$ROOT/tests/fuzz/$target.dict" ]] && dict=(-dict="$ROOT/tests/fuzz/$target.dict")
  log="$FUZZ/$target.log"
  echo "fuzz: $target for ${SECONDS_PER_TARGET}s"
  set +e
  "./$target" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 "${dict[@]}" "$corpus" "$FUZZ/seeds/$target" \
    >"$log" 2>&1
  rc=$?
  set -e
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  crashed=0
  if [[ $rc -ne 0 ]]; then
    crashed=1
    status=1
    tail -40 "$log" >&2
  fi
  echo "fuzz-summary target=$target seconds=$SECONDS_PER_TARGET execs=${execs:-0} crashes=$crashed corpus=$(ls "$corpus" | wc -l)"
done
exit $status
