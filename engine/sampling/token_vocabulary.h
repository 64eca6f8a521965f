// The vocabulary as the bytes each token stands for, in a trie, so that structured output can
// mask every token that cannot continue a GrammarMatcher: one walk down the trie per step, a
// branch dropped at its first refused byte, instead of one match per token. The target's
// sampler, DSpark's drafts and their verification all mask with it, so speculation stays
// lossless under a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/structured/grammar_matcher.h"

namespace pdspark::sampling {

class TokenVocabulary {
 public:
  // `token_bytes[id]`: what token id decodes to; empty for special tokens, which a grammar
  // never allows (the end tokens aside).
  explicit TokenVocabulary(std::vector<std::string> token_bytes);
  // From the checkpoint's tokenizer.json, padded with empty entries to the model's vocabulary.
  static StatusOr<std::shared_ptr<const TokenVocabulary>> FromModelDir(const std::string& dir,
                                                                       int64_t vocab_size);
  // FromModelDir for a worker: without a readable tokenizer.json it serves on with structured
  // output off (requests asking for it are refused), and says so in the log; null then.
  static std::shared_ptr<const TokenVocabulary> ForWorker(const std::string& dir,
                                                          int64_t vocab_size);

  // Sets -inf on every token of `logits` that `matcher` refuses. `end_ids` stay only where the
  // matcher can end, and are all that stays when it cannot continue.
  void Mask(const structured::GrammarMatcher& matcher, std::span<const int32_t> end_ids,
            std::span<float> logits) const;
  // Advances `matcher` by the token's bytes; false when the grammar refuses them. An end token
  // leaves the matcher as it is and is accepted where the document can end (with ignore_eos
  // it is all that may follow, again and again).
  bool Accept(structured::GrammarMatcher& matcher, int32_t token,
              std::span<const int32_t> end_ids = {}) const;
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node
    std::vector<int32_t> tokens;                        // tokens spelled by the path here
  };
  using Trie = std::vector<Node>;  // node 0 is the root
  static void Insert(Trie& trie, const std::string& bytes, int32_t token);
  static void Walk(const Trie& trie, int32_t node, const structured::GrammarMatcher& matcher,
                   std::vector<char>& allowed);

  std::vector<std::string> bytes_;
  Trie all_;
  // Inside a free string (GrammarMatcher::InFreeString) every plain token is allowed; only the
  // others (a quote, a backslash, a control byte, broken UTF-8: a few percent) need the walk.
  std::vector<int32_t> plain_;
  Trie not_plain_;
};

}  // namespace pdspark::sampling
