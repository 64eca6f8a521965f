// The `added_tokens` of a tokenizer.json (BOS/EOS, chat markers, the DSpark noise token...).
// Like HF's AddedVocabulary, they are cut out of the input before pre-tokenization: the
// leftmost, then longest, occurrence wins, honouring lstrip / rstrip / single_word. Tokens with
// normalized=false are matched first, then the others on the remaining segments.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace pdspark::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A piece of input: either an added token (id >= 0) or text for the regular pipeline.
struct Segment {
  std::string_view text;
  int32_t token_id = -1;
};

class AddedVocabulary {
 public:
  static StatusOr<AddedVocabulary> FromJson(const nlohmann::json& added_tokens);

  // Splits `text` into added-token and plain segments. With parse_special false, special
  // tokens are left as plain text (non-special added tokens still match).
  std::vector<Segment> Split(std::string_view text, bool parse_special) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* FindByContent(std::string_view content) const;
  const AddedToken* FindById(int32_t id) const;

 private:
  // Byte trie over the contents of one group of tokens.
  class Trie {
   public:
    void Insert(std::string_view key, int token_index);
    // Index into tokens_ of the longest key that starts at `pos`, or -1; *length gets its size.
    int LongestAt(std::string_view text, size_t pos, size_t* length) const;
    bool empty() const { return nodes_ == 1; }

   private:
    absl::flat_hash_map<uint64_t, int> edges_;  // (node << 8 | byte) -> child
    std::array<bool, 256> first_byte_ = {};     // cheap reject for most text positions
    std::vector<int> terminal_ = {-1};          // node -> token index
    int nodes_ = 1;
  };

  void SplitWith(const Trie& trie, std::string_view text, bool parse_special,
                 std::vector<Segment>* out) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<std::string, int> by_content_;
  absl::flat_hash_map<int32_t, int> by_id_;
  Trie raw_trie_;         // normalized == false
  Trie normalized_trie_;  // normalized == true
};

}  // namespace pdspark::tokenizer
