// A tokenizer.json `Split` regex evaluated with Oniguruma's semantics (what HF tokenizers runs):
// leftmost match, top-level alternatives tried in order at each position, backtracking
// quantifiers. Look-around-free alternatives run in RE2 (whose leftmost-first mode gives the
// same matches); alternatives with a look-ahead such as `\s+(?!\S)` run in a small
// backtracking matcher, and the two are merged by position and alternative order.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/tokenizer/code_point_set.h"
#include "common/tokenizer/onig_pattern.h"

namespace re2 {
class RE2;
}

namespace pdspark::tokenizer {

class SplitRegex {
 public:
  // Errors name the pattern when it uses a construct this engine does not reproduce.
  static StatusOr<std::unique_ptr<SplitRegex>> Compile(std::string_view pattern);
  ~SplitRegex();

  // Byte ranges [begin, end) of the matches, as Oniguruma's find_iter yields them over `text`
  // (including empty matches, never an empty match right after the previous match).
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Match {
    size_t begin;
    size_t end;
    int alternative;  // index among the top-level alternatives; -1 when not yet known
  };
  struct LookaheadAlternative {
    int index;
    std::vector<LookaheadItem> items;
    std::vector<std::unique_ptr<CodePointSet>> sets;  // one per item
  };

  SplitRegex() = default;
  std::optional<Match> FindFrom(std::string_view text, size_t start) const;
  int RegularAlternativeAt(std::string_view text, size_t pos) const;
  static std::optional<size_t> MatchItems(const LookaheadAlternative& alt, std::string_view text,
                                          size_t item, size_t pos);

  std::string pattern_;
  std::unique_ptr<re2::RE2> regular_;  // all look-around-free alternatives, each a group
  std::vector<int> regular_indices_;   // group i+1 of regular_ is alternative regular_indices_[i]
  std::vector<LookaheadAlternative> lookahead_;
};

}  // namespace pdspark::tokenizer
