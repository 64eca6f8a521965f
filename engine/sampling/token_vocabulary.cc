#include "engine/sampling/token_vocabulary.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/base/logging.h"
#include "common/tokenizer/tokenizer.h"

namespace pdspark::sampling {

namespace {

// String content that any free string takes, whatever comes before it: no quote, backslash or
// control byte, and UTF-8 as far as it goes (it may stop inside a character).
bool Plain(const std::string& bytes) {
  int left = 0;  // continuation bytes due
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (left > 0) {
      if ((b & 0xC0) != 0x80) return false;
      --left;
    } else if (b == '"' || b == '\\' || b < 0x20) {
      return false;
    } else if (b >= 0x80) {
      if (b >= 0xC2 && b <= 0xDF) {
        left = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        left = 2;
      } else if (b >= 0xF0 && b <= 0xF4) {
        left = 3;
      } else {
        return false;
      }
    }
  }
  return !bytes.empty();
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes)
    : bytes_(std::move(token_bytes)), all_(1), not_plain_(1) {
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id) {
    Insert(all_, bytes_[id], id);
    if (Plain(bytes_[id])) {
      plain_.push_back(id);
    } else {
      Insert(not_plain_, bytes_[id], id);
    }
  }
}

void TokenVocabulary::Insert(Trie& trie, const std::string& bytes, int32_t token) {
  int32_t node = 0;
  for (char c : bytes) {
    const auto byte = static_cast<uint8_t>(c);
    auto& children = trie[node].children;
    auto it = std::find_if(children.begin(), children.end(),
                           [&](const auto& child) { return child.first == byte; });
    if (it != children.end()) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(trie.size());
    children.emplace_back(byte, next);
    trie.emplace_back();  // may move `children`: not used after this
    node = next;
  }
  if (node != 0) trie[node].tokens.push_back(token);
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

std::shared_ptr<const TokenVocabulary> TokenVocabulary::ForWorker(const std::string& dir,
                                                                  int64_t vocab_size) {
  auto vocabulary = FromModelDir(dir, vocab_size);
  if (vocabulary.ok()) return *vocabulary;
  LOG_WARN("structured output off: {}", vocabulary.status().ToString());
  return nullptr;
}

void TokenVocabulary::Walk(const Trie& trie, int32_t node,
                           const structured::GrammarMatcher& matcher, std::vector<char>& allowed) {
  for (const auto& [byte, child] : trie[node].children) {
    structured::GrammarMatcher next = matcher;
    if (!next.Advance(byte)) continue;
    for (int32_t token : trie[child].tokens) allowed[token] = 1;
    Walk(trie, child, next, allowed);
  }
}

void TokenVocabulary::Mask(const structured::GrammarMatcher& matcher,
                           std::span<const int32_t> end_ids, std::span<float> logits) const {
  std::vector<char> allowed(std::max(logits.size(), bytes_.size()), 0);
  if (matcher.InFreeString()) {
    for (int32_t token : plain_) allowed[token] = 1;
    Walk(not_plain_, 0, matcher, allowed);
  } else if (!matcher.dead()) {
    Walk(all_, 0, matcher, allowed);
  }
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

bool TokenVocabulary::Accept(structured::GrammarMatcher& matcher, int32_t token,
                             std::span<const int32_t> end_ids) const {
  if (std::find(end_ids.begin(), end_ids.end(), token) != end_ids.end()) return matcher.CanEnd();
  if (token < 0 || token >= size() || bytes_[token].empty()) return false;
  return matcher.Advance(bytes_[token]);
}

}  // namespace pdspark::sampling
