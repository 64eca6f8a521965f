// Translation of the Oniguruma regex dialect that HF tokenizer.json `Split` patterns are written
// in into RE2 syntax. The two differ where it matters for tokenizers: Oniguruma's \s, \w, \d
// are Unicode-aware while RE2's are ASCII-only, `$`/`^` are line anchors, and RE2 has no
// look-around. Look-around is only accepted in a restricted shape (see ParseLookaheadSequence)
// that SplitRegex evaluates by hand; every other unsupported construct is an error naming the
// pattern, so a tokenizer.json we cannot reproduce faithfully never loads silently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::tokenizer {

// One top-level `|` alternative of a pattern.
struct PatternAlternative {
  std::string source;  // as written in the pattern
  bool has_lookaround = false;
  std::string re2;  // RE2 translation; empty when has_lookaround
};

// Splits `pattern` at top-level `|` and translates each look-around-free alternative to RE2.
StatusOr<std::vector<PatternAlternative>> TranslateOnigPattern(std::string_view pattern);

// One element of a look-around alternative: a single-character atom with a repeat count, or a
// look-ahead that tests (without consuming) the next character against such an atom.
struct LookaheadItem {
  enum class Kind { kAtom, kLookahead };
  Kind kind = Kind::kAtom;
  std::string atom_re2;  // RE2 pattern that matches exactly one character
  int min = 1;
  int max = 1;  // kUnbounded for `*`, `+`, `{n,}`
  bool lazy = false;
  bool negative = false;  // (?!...) rather than (?=...)
  static constexpr int kUnbounded = 1 << 30;
};

// Parses an alternative made only of single-character atoms (literals, classes, escapes, `.`),
// each optionally quantified, and look-aheads `(?=A)` / `(?!A)` over one such atom, e.g.
// `\s+(?!\S)`. `pattern` is the whole pattern, for error messages.
StatusOr<std::vector<LookaheadItem>> ParseLookaheadSequence(std::string_view alternative,
                                                            std::string_view pattern);

}  // namespace pdspark::tokenizer
