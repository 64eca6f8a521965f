// libFuzzer target: arbitrary bytes through the tokenizer the router and the CLI load (the
// bundled model's byte-level BPE). The first byte picks the mode:
//   even: the bytes are text. Encoding never crashes; for valid UTF-8 encoded without special
//         tokens, Decode gives the text back exactly, and feeding the ids one by one to the
//         IncrementalDetokenizer gives the same text (its documented invariant).
//   odd:  the bytes are token ids (2 bytes each, any value): Decode and the incremental
//         detokenizer agree, and every delta is valid UTF-8.
// The tokenizer file comes from $PDSPARK_FUZZ_TOKENIZER, else the path compiled in.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"

namespace {

using pdspark::tokenizer::IncrementalDetokenizer;
using pdspark::tokenizer::Tokenizer;

void Require(bool ok) {
  if (!ok) std::abort();
}

bool IsValidUtf8(std::string_view text) {
  return !pdspark::tokenizer::FindInvalidUtf8(text).has_value();
}

const Tokenizer& Load() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    const char* path = std::getenv("PDSPARK_FUZZ_TOKENIZER");
    auto loaded = Tokenizer::FromFile(path != nullptr ? path : PDSPARK_FUZZ_TOKENIZER_PATH);
    if (!loaded.ok()) {
      std::fprintf(stderr, "tokenizer_fuzzer: %s\n", loaded.status().ToString().c_str());
      std::exit(2);
    }
    return std::move(loaded).value();
  }();
  return *tokenizer;
}

std::string Streamed(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detokenizer(&tokenizer);
  std::string out;
  for (int32_t id : ids) {
    const std::string delta = detokenizer.Feed(id);
    Require(IsValidUtf8(delta));
    out += delta;
  }
  const std::string tail = detokenizer.Flush();
  Require(IsValidUtf8(tail));
  return out + tail;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tokenizer = Load();
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    for (bool parse_special : {false, true}) {
      auto ids = tokenizer.Encode(rest, /*add_bos=*/false, parse_special);
      if (!ids.ok()) continue;
      for (int32_t id : *ids) Require(id >= 0 && id < tokenizer.vocab_size());
      if (parse_special || !IsValidUtf8(rest)) continue;
      Require(tokenizer.Decode(*ids) == rest);
      Require(Streamed(tokenizer, *ids) == rest);
    }
    return 0;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < rest.size(); i += 2) {
    ids.push_back(static_cast<uint8_t>(rest[i]) | static_cast<uint8_t>(rest[i + 1]) << 8);
  }
  Require(Streamed(tokenizer, ids) == tokenizer.Decode(ids));
  return 0;
}
