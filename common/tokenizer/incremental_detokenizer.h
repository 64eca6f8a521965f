// Streaming detokenization: feed generated ids one at a time and get text deltas that are
// always well-formed UTF-8. A token may end in the middle of a multi-byte character (byte-level
// BPE splits emoji and CJK freely), so bytes of an incomplete character are held back until
// the next token completes it. The concatenated deltas plus Flush() equal Decode() of all ids.
// One instance per stream; not thread-safe (the Tokenizer it reads is).
#pragma once

#include <cstdint>
#include <string>

#include "common/tokenizer/tokenizer.h"

namespace pdspark::tokenizer {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special = false);

  // Text made complete by `id`; often empty while a character is still partial. Unknown ids
  // are skipped, as in Tokenizer::Decode.
  std::string Feed(int32_t id);

  // Emits what is held back (U+FFFD for a dangling partial character) and resets.
  std::string Flush();

  // Bytes currently held back.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace pdspark::tokenizer
