// A regular expression compiled to a byte-level NFA (Thompson's construction), for structured
// output's guided_regex: GrammarMatcher keeps one stack per NFA state still possible, so a byte
// advances them all at once. The syntax is the common core of Python's `re` (what vLLM users
// write): literals, `.`, classes `[a-z_]` and `[^…]`, `\d \w \s \D \W \S`, escapes, groups
// `(…)` and `(?:…)`, `|`, and the quantifiers `* + ? {m} {m,} {m,n}`. `^` and `$` are accepted at
// the ends (the whole output always matches the whole pattern). Classes and `.` work on bytes:
// `.` is any byte but a newline. Lookarounds, backreferences and flags are refused by name.
#pragma once

#include <bitset>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::structured {

inline constexpr int kMaxRegexStates = 20000;

struct RegexNfa {
  struct State {
    enum class Kind : uint8_t { kBytes, kSplit, kMatch };
    Kind kind = Kind::kMatch;
    std::bitset<256> bytes;  // kBytes: the bytes that move on to `out`
    int32_t out = -1;        // kBytes, kSplit
    int32_t out2 = -1;       // kSplit
  };
  std::vector<State> states;
  int32_t start = -1;

  static StatusOr<RegexNfa> Compile(std::string_view pattern);
  // The byte-consuming and matching states reachable from `state` without consuming a byte.
  void Closure(int32_t state, std::vector<int32_t>& out) const;
};

}  // namespace pdspark::structured
