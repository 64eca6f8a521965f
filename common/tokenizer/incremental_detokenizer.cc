#include "common/tokenizer/incremental_detokenizer.h"

#include "common/tokenizer/utf8.h"

namespace pdspark::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::Feed(int32_t id) {
  if (skip_special_ && tokenizer_->IsSpecial(id)) return "";
  pending_.append(tokenizer_->TokenBytes(id));
  // Everything before a trailing incomplete character converts the same whatever follows.
  const size_t stable = StableUtf8Prefix(pending_);
  std::string out = LossyUtf8(std::string_view(pending_).substr(0, stable));
  pending_.erase(0, stable);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out = LossyUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace pdspark::tokenizer
