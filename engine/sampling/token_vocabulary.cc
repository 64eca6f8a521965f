#include "engine/sampling/token_vocabulary.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"

namespace pdspark::sampling {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes)
    : bytes_(std::move(token_bytes)) {
  nodes_.emplace_back();
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id) {
    int32_t node = 0;
    for (char c : bytes_[id]) {
      const auto byte = static_cast<uint8_t>(c);
      auto& children = nodes_[node].children;
      auto it = std::find_if(children.begin(), children.end(),
                             [&](const auto& child) { return child.first == byte; });
      if (it != children.end()) {
        node = it->second;
        continue;
      }
      const auto next = static_cast<int32_t>(nodes_.size());
      children.emplace_back(byte, next);
      nodes_.emplace_back();  // may move `children`: not used after this
      node = next;
    }
    if (node != 0) nodes_[node].tokens.push_back(id);
  }
}

StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::FromModelDir(
    const std::string& dir, int64_t vocab_size) {
  const std::string path = dir + "/tokenizer.json";
  ASSIGN_OR_RETURN(auto tokenizer, tokenizer::Tokenizer::FromFile(path));
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  const int64_t known = std::min<int64_t>(vocab_size, tokenizer->vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (!tokenizer->IsSpecial(id)) bytes[id] = std::string(tokenizer->TokenBytes(id));
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes));
}

void TokenVocabulary::Walk(int32_t node, const structured::GrammarMatcher& matcher,
                           std::vector<char>& allowed) const {
  for (const auto& [byte, child] : nodes_[node].children) {
    structured::GrammarMatcher next = matcher;
    if (!next.Advance(byte)) continue;
    for (int32_t token : nodes_[child].tokens) allowed[token] = 1;
    Walk(child, next, allowed);
  }
}

void TokenVocabulary::Mask(const structured::GrammarMatcher& matcher,
                           std::span<const int32_t> end_ids, std::span<float> logits) const {
  std::vector<char> allowed(logits.size(), 0);
  if (!matcher.dead()) Walk(0, matcher, allowed);
  const bool can_continue = std::find(allowed.begin(), allowed.end(), 1) != allowed.end();
  for (int32_t id : end_ids) {
    if (id < 0 || id >= static_cast<int32_t>(logits.size())) continue;
    if (matcher.CanEnd() || !can_continue) {
      allowed[id] = 1;
      // Stopping is all that is left even where EOS was suppressed (min_tokens).
      if (!can_continue && !std::isfinite(logits[id])) logits[id] = 0.0f;
    }
  }
  for (size_t id = 0; id < logits.size(); ++id) {
    if (!allowed[id]) logits[id] = -std::numeric_limits<float>::infinity();
  }
}

bool TokenVocabulary::Accept(structured::GrammarMatcher& matcher, int32_t token) const {
  if (token < 0 || token >= size() || bytes_[token].empty()) return false;
  return matcher.Advance(bytes_[token]);
}

}  // namespace pdspark::sampling
