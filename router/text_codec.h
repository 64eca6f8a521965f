// What the router needs from a tokenizer: text -> ids for prompts, and streaming ids -> text for
// outputs. An interface so the request path does not depend on how the tokenizer is loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::router {

class StreamDetokenizer {
 public:
  virtual ~StreamDetokenizer() = default;
  // Text completed by `id`; empty while a multi-byte character is still partial.
  virtual std::string Push(uint32_t id) = 0;
  // Whatever is held back, at the end of the stream.
  virtual std::string Flush() = 0;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // `parse_special`: special-token strings in `text` become their ids (true for the output of
  // the chat template, which writes them on purpose).
  virtual StatusOr<std::vector<uint32_t>> Encode(std::string_view text,
                                                 bool parse_special) const = 0;
  virtual std::unique_ptr<StreamDetokenizer> NewDetokenizer(bool skip_special_tokens) const = 0;
  virtual std::optional<uint32_t> bos_token_id() const = 0;
  // Ids at or above this are not tokens (the tokenizer's vocabulary).
  virtual uint32_t vocab_size() const = 0;
};

// The text of `ids` decoded together, special tokens kept (a dangling partial character ends as
// U+FFFD).
inline std::string DecodeAll(const TextCodec& codec, std::span<const uint32_t> ids) {
  auto detokenizer = codec.NewDetokenizer(/*skip_special_tokens=*/false);
  std::string text;
  for (uint32_t id : ids) text += detokenizer->Push(id);
  return text + detokenizer->Flush();
}

}  // namespace pdspark::router
