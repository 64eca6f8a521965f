#include "common/tokenizer/onig_pattern.h"

#include <cctype>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/strings.h"
#include "common/tokenizer/utf8.h"

namespace pdspark::tokenizer {
namespace {

// Oniguruma's Unicode \s is the White_Space property; RE2's \s is ASCII-only.
constexpr std::string_view kSpaceBody =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation.
constexpr std::string_view kWordBody = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr std::string_view kHexBody = "0-9A-Fa-f";

std::string CodePointRe2(char32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z')) {
    return std::string(1, static_cast<char>(cp));
  }
  return absl::StrFormat("\\x{%X}", static_cast<uint32_t>(cp));
}

// A lexical element of the pattern: either one literal code point or a ready RE2 snippet.
struct Element {
  std::optional<char32_t> literal;
  std::string snippet;
  bool is_char_set = false;  // snippet matches exactly one character
  std::string Re2() const { return literal ? CodePointRe2(*literal) : snippet; }
};

class Translator {
 public:
  explicit Translator(std::string_view pattern) : pattern_(pattern) {}

  // Translates s[begin, end) (one alternative) into RE2. Sets *lookaround instead of failing
  // when a look-around group is found.
  StatusOr<std::string> TranslateRange(size_t begin, size_t end, bool* lookaround);

  // Reads one element starting at *pos outside a class: escape, class, `.` or literal.
  // Returns nullopt for anything that is not a single-character element.
  StatusOr<std::optional<Element>> ReadAtom(size_t* pos, size_t end);

  // Parses a quantifier at *pos, if any.
  StatusOr<bool> ReadQuantifier(size_t* pos, size_t end, int* min, int* max, bool* lazy);

  // Finds the end of the top-level alternatives of the whole pattern.
  StatusOr<std::vector<std::pair<size_t, size_t>>> TopLevelRanges();

  Status Error(std::string_view what, size_t pos) const {
    return absl::UnimplementedError(absl::StrCat("unsupported regex construct ", ToAbsl(what),
                                                 " at offset ", pos, " in Split pattern '",
                                                 ToAbsl(pattern_), "'"));
  }
  Status Malformed(std::string_view what, size_t pos) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed regex (", ToAbsl(what), ") at offset ",
                                                   pos, " in pattern '", ToAbsl(pattern_), "'"));
  }

 private:
  StatusOr<Element> ReadEscape(size_t* pos, size_t end, bool in_class);
  StatusOr<Element> ReadClass(size_t* pos, size_t end);
  StatusOr<std::string> ReadGroupOpen(size_t* pos, size_t end, bool* lookaround);
  StatusOr<char32_t> ReadHex(size_t* pos, size_t end, size_t min_digits, size_t max_digits);
  char32_t ReadLiteral(size_t* pos);
  std::optional<size_t> SkipClass(size_t pos, size_t end) const;

  std::string_view pattern_;
};

char32_t Translator::ReadLiteral(size_t* pos) {
  const Utf8Step step = DecodeUtf8(pattern_, *pos);
  *pos += step.length;
  return step.valid ? step.code_point : 0xFFFD;
}

StatusOr<char32_t> Translator::ReadHex(size_t* pos, size_t end, size_t min_digits,
                                       size_t max_digits) {
  char32_t value = 0;
  size_t digits = 0;
  while (*pos < end && digits < max_digits && std::isxdigit(static_cast<uint8_t>(pattern_[*pos]))) {
    const char c = pattern_[*pos];
    value = value * 16 + (std::isdigit(static_cast<uint8_t>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    ++*pos;
    ++digits;
  }
  if (digits < min_digits || value > 0x10FFFF) return Malformed("bad hex escape", *pos);
  return value;
}

StatusOr<Element> Translator::ReadEscape(size_t* pos, size_t end, bool in_class) {
  const size_t start = *pos;
  if (start + 1 >= end) return Malformed("trailing backslash", start);
  const char e = pattern_[start + 1];
  *pos = start + 2;
  auto set = [](std::string s) { return Element{std::nullopt, std::move(s), true}; };
  auto lit = [](char32_t cp) { return Element{cp, "", true}; };
  auto negated_body = [&](std::string_view body) -> StatusOr<Element> {
    if (in_class) return Error(absl::StrCat("\\", std::string(1, e), " inside [...]"), start);
    return set(absl::StrCat("[^", ToAbsl(body), "]"));
  };
  auto body = [&](std::string_view b) {
    return in_class ? set(std::string(b)) : set(absl::StrCat("[", ToAbsl(b), "]"));
  };
  switch (e) {
    case 'p':
    case 'P': {
      bool negate = e == 'P';
      std::string name;
      if (*pos < end && pattern_[*pos] == '{') {
        const size_t close = pattern_.find('}', *pos);
        if (close == std::string_view::npos || close >= end) {
          return Malformed("unterminated \\p{", start);
        }
        name = std::string(pattern_.substr(*pos + 1, close - *pos - 1));
        *pos = close + 1;
      } else if (*pos < end) {
        name = std::string(1, pattern_[(*pos)++]);
      }
      if (!name.empty() && name[0] == '^') {
        negate = !negate;
        name.erase(0, 1);
      }
      if (name.empty()) return Malformed("empty property name", start);
      return set(absl::StrCat(negate ? "\\P{" : "\\p{", name, "}"));
    }
    case 's':
      return body(kSpaceBody);
    case 'S':
      return negated_body(kSpaceBody);
    case 'w':
      return body(kWordBody);
    case 'W':
      return negated_body(kWordBody);
    case 'h':
      return body(kHexBody);
    case 'H':
      return negated_body(kHexBody);
    case 'd':
      return set("\\p{Nd}");
    case 'D':
      return set("\\P{Nd}");
    case 'n':
      return lit('\n');
    case 'r':
      return lit('\r');
    case 't':
      return lit('\t');
    case 'f':
      return lit('\f');
    case 'v':
      return lit('\v');
    case 'a':
      return lit('\a');
    case 'e':
      return lit(0x1B);
    case 'x': {
      if (*pos < end && pattern_[*pos] == '{') {
        ++*pos;
        ASSIGN_OR_RETURN(const char32_t cp, ReadHex(pos, end, 1, 8));
        if (*pos >= end || pattern_[*pos] != '}') return Malformed("unterminated \\x{", start);
        ++*pos;
        return lit(cp);
      }
      ASSIGN_OR_RETURN(const char32_t cp, ReadHex(pos, end, 1, 2));
      return lit(cp);
    }
    case 'u': {
      ASSIGN_OR_RETURN(const char32_t cp, ReadHex(pos, end, 4, 4));
      return lit(cp);
    }
    case 'b':
      if (in_class) return lit('\b');
      // RE2's word boundary is ASCII-only, Oniguruma's is Unicode: refuse rather than differ.
      return Error("word boundary \\b", start);
    case 'B':
      if (in_class) return Error("\\B inside [...]", start);
      return Error("word boundary \\B", start);
    case 'A':
    case 'z':
      if (in_class) return Error(absl::StrCat("\\", std::string(1, e), " inside [...]"), start);
      return Element{std::nullopt, absl::StrCat("\\", std::string(1, e)), false};
    default:
      break;
  }
  if (std::isalnum(static_cast<uint8_t>(e))) {
    return Error(absl::StrCat("escape \\", std::string(1, e)), start);
  }
  *pos = start + 1;
  return lit(ReadLiteral(pos));  // escaped punctuation or non-ASCII: the character itself
}

StatusOr<Element> Translator::ReadClass(size_t* pos, size_t end) {
  const size_t start = *pos;
  size_t i = start + 1;
  bool negate = false;
  if (i < end && pattern_[i] == '^') {
    negate = true;
    ++i;
  }
  std::string body;
  std::optional<char32_t> pending;  // last literal, still able to start a range
  bool first = true;
  auto flush = [&] {
    if (pending) body += CodePointRe2(*pending);
    pending.reset();
  };
  while (true) {
    if (i >= end) return Malformed("unterminated [...]", start);
    const char c = pattern_[i];
    if (c == ']' && !first) break;
    if (c == '[') return Error("nested class or POSIX bracket inside [...]", i);
    if (c == '&' && i + 1 < end && pattern_[i + 1] == '&') return Error("class intersection &&", i);
    if (c == '-' && pending && i + 1 < end && pattern_[i + 1] != ']') {
      ++i;
      Element hi;
      if (pattern_[i] == '\\') {
        ASSIGN_OR_RETURN(hi, ReadEscape(&i, end, true));
      } else if (pattern_[i] == '[') {
        return Error("nested class inside [...]", i);
      } else {
        hi.literal = ReadLiteral(&i);
      }
      if (!hi.literal) return Malformed("range ends in a class escape", i);
      if (*hi.literal < *pending) return Malformed("empty range in [...]", i);
      body += absl::StrCat(CodePointRe2(*pending), "-", CodePointRe2(*hi.literal));
      pending.reset();
      first = false;
      continue;
    }
    flush();
    if (c == '\\') {
      ASSIGN_OR_RETURN(Element element, ReadEscape(&i, end, true));
      if (element.literal) {
        pending = element.literal;
      } else {
        body += element.snippet;
      }
    } else {
      pending = ReadLiteral(&i);
    }
    first = false;
  }
  flush();
  *pos = i + 1;
  return Element{std::nullopt, absl::StrCat(negate ? "[^" : "[", body, "]"), true};
}

StatusOr<std::optional<Element>> Translator::ReadAtom(size_t* pos, size_t end) {
  if (*pos >= end) return std::optional<Element>();
  const char c = pattern_[*pos];
  switch (c) {
    case '\\': {
      ASSIGN_OR_RETURN(Element e, ReadEscape(pos, end, false));
      return std::optional<Element>(std::move(e));
    }
    case '[': {
      ASSIGN_OR_RETURN(Element e, ReadClass(pos, end));
      return std::optional<Element>(std::move(e));
    }
    case '.':
      ++*pos;
      return std::optional<Element>(Element{std::nullopt, ".", true});
    case '(':
    case ')':
    case '|':
    case '*':
    case '+':
    case '?':
    case '{':
    case '^':
    case '$':
      return std::optional<Element>();
    default:
      return std::optional<Element>(Element{ReadLiteral(pos), "", true});
  }
}

StatusOr<bool> Translator::ReadQuantifier(size_t* pos, size_t end, int* min, int* max, bool* lazy) {
  if (*pos >= end) return false;
  const size_t start = *pos;
  const char c = pattern_[start];
  if (c == '*' || c == '+' || c == '?') {
    *min = c == '+' ? 1 : 0;
    *max = c == '?' ? 1 : LookaheadItem::kUnbounded;
    ++*pos;
  } else if (c == '{') {
    // {n}, {n,}, {n,m}, {,m}; anything else is a literal brace in Oniguruma.
    size_t i = start + 1;
    auto number = [&](int* out) {
      const size_t digits_start = i;
      long value = 0;
      while (i < end && std::isdigit(static_cast<uint8_t>(pattern_[i])) && value < 100000) {
        value = value * 10 + (pattern_[i++] - '0');
      }
      *out = static_cast<int>(value);
      return i > digits_start;
    };
    int lo = 0;
    int hi = 0;
    const bool has_lo = number(&lo);
    if (i < end && pattern_[i] == '}') {
      if (!has_lo) return false;
      hi = lo;
    } else if (i < end && pattern_[i] == ',') {
      ++i;
      if (!number(&hi)) hi = LookaheadItem::kUnbounded;
      if (!has_lo && hi == LookaheadItem::kUnbounded) return false;
      if (i >= end || pattern_[i] != '}') return false;
    } else {
      return false;
    }
    if (hi < lo) return Malformed("interval {n,m} with m < n", start);
    *min = lo;
    *max = hi;
    *pos = i + 1;
  } else {
    return false;
  }
  *lazy = false;
  if (*pos < end && pattern_[*pos] == '?') {
    *lazy = true;
    ++*pos;
  } else if (*pos < end && pattern_[*pos] == '+') {
    return Error("possessive quantifier", *pos);
  }
  return true;
}

StatusOr<std::string> Translator::ReadGroupOpen(size_t* pos, size_t end, bool* lookaround) {
  const size_t start = *pos;
  std::string_view rest = pattern_.substr(start, end - start);
  auto starts = [&](std::string_view p) { return rest.substr(0, p.size()) == p; };
  if (!starts("(?")) {
    *pos += 1;
    return std::string("(?:");  // captures are irrelevant to splitting
  }
  if (starts("(?=") || starts("(?!") || starts("(?<=") || starts("(?<!")) {
    *lookaround = true;
    return std::string();
  }
  if (starts("(?:")) {
    *pos += 3;
    return std::string("(?:");
  }
  if (starts("(?>")) return Error("atomic group (?>...)", start);
  if (starts("(?#")) {
    const size_t close = pattern_.find(')', start);
    if (close == std::string_view::npos || close >= end) return Malformed("open comment", start);
    *pos = close + 1;
    return std::string();
  }
  if (starts("(?<") || starts("(?P<") || starts("(?'")) {
    const char close_char = starts("(?'") ? '\'' : '>';
    const size_t close = pattern_.find(close_char, start + 3);
    if (close == std::string_view::npos || close >= end) return Malformed("bad group name", start);
    *pos = close + 1;
    return std::string("(?:");
  }
  // Option groups: (?imx-imx) or (?imx-imx:...). Oniguruma's `m` is RE2's `s` (dot-all).
  size_t i = start + 2;
  std::string flags;
  while (i < end && (pattern_[i] == 'i' || pattern_[i] == 'm' || pattern_[i] == '-')) {
    flags += pattern_[i] == 'm' ? 's' : pattern_[i];
    ++i;
  }
  if (i < end && pattern_[i] == 'x') return Error("extended mode (?x)", start);
  if (flags.empty() || i >= end || (pattern_[i] != ')' && pattern_[i] != ':')) {
    return Error("group syntax", start);
  }
  *pos = i + 1;
  return absl::StrCat("(?", flags, pattern_[i] == ':' ? ":" : ")");
}

StatusOr<std::string> Translator::TranslateRange(size_t begin, size_t end, bool* lookaround) {
  std::string out;
  size_t i = begin;
  while (i < end) {
    const char c = pattern_[i];
    if (c == '(') {
      ASSIGN_OR_RETURN(std::string open, ReadGroupOpen(&i, end, lookaround));
      if (*lookaround) return std::string();
      out += open;
      continue;
    }
    if (c == ')' || c == '|') {
      out += c;
      ++i;
      continue;
    }
    if (c == '^' || c == '$') {
      out += c == '^' ? "(?m:^)" : "(?m:$)";  // Oniguruma anchors are line anchors
      ++i;
      continue;
    }
    int min = 0;
    int max = 0;
    bool lazy = false;
    const size_t quantifier_pos = i;
    ASSIGN_OR_RETURN(const bool quantified, ReadQuantifier(&i, end, &min, &max, &lazy));
    if (quantified) {
      if (max == LookaheadItem::kUnbounded) {
        const std::string_view q = pattern_.substr(quantifier_pos, 1);
        out += (q == "*" || q == "+") ? std::string(q) : absl::StrCat("{", min, ",}");
      } else if (min == 0 && max == 1) {
        out += "?";
      } else {
        out += absl::StrCat("{", min, ",", max, "}");
      }
      if (lazy) out += "?";
      continue;
    }
    if (c == '{') {  // not a valid interval: a literal brace
      out += "\\{";
      ++i;
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<Element> atom, ReadAtom(&i, end));
    if (!atom) return Malformed("unexpected character", i);
    out += atom->Re2();
  }
  return out;
}

std::optional<size_t> Translator::SkipClass(size_t pos, size_t end) const {
  size_t i = pos + 1;
  if (i < end && pattern_[i] == '^') ++i;
  if (i < end && pattern_[i] == ']') ++i;
  while (i < end) {
    if (pattern_[i] == '\\') {
      i += 2;
    } else if (pattern_[i] == ']') {
      return i + 1;
    } else {
      ++i;
    }
  }
  return std::nullopt;
}

StatusOr<std::vector<std::pair<size_t, size_t>>> Translator::TopLevelRanges() {
  std::vector<std::pair<size_t, size_t>> ranges;
  const size_t end = pattern_.size();
  size_t begin = 0;
  int depth = 0;
  size_t i = 0;
  while (i < end) {
    const char c = pattern_[i];
    if (c == '\\') {
      i += 2;
    } else if (c == '[') {
      const std::optional<size_t> after = SkipClass(i, end);
      if (!after) return Malformed("unterminated [...]", i);
      i = *after;
    } else {
      if (c == '(') ++depth;
      if (c == ')' && --depth < 0) return Malformed("unbalanced )", i);
      if (c == '|' && depth == 0) {
        ranges.emplace_back(begin, i);
        begin = i + 1;
      }
      ++i;
    }
  }
  if (depth != 0) return Malformed("unbalanced (", end);
  ranges.emplace_back(begin, end);
  return ranges;
}

}  // namespace

StatusOr<std::vector<PatternAlternative>> TranslateOnigPattern(std::string_view pattern) {
  if (FindInvalidUtf8(pattern)) {
    return absl::InvalidArgumentError(absl::StrCat("pattern is not UTF-8: '", ToAbsl(pattern), "'"));
  }
  Translator translator(pattern);
  ASSIGN_OR_RETURN(const auto ranges, translator.TopLevelRanges());
  std::vector<PatternAlternative> alternatives;
  for (const auto& [begin, end] : ranges) {
    PatternAlternative alt;
    alt.source = std::string(pattern.substr(begin, end - begin));
    ASSIGN_OR_RETURN(alt.re2, translator.TranslateRange(begin, end, &alt.has_lookaround));
    alternatives.push_back(std::move(alt));
  }
  return alternatives;
}

StatusOr<std::vector<LookaheadItem>> ParseLookaheadSequence(std::string_view alternative,
                                                            std::string_view pattern) {
  const std::string text(alternative);
  Translator translator(text);
  const auto unsupported = [&](size_t pos) {
    return absl::UnimplementedError(absl::StrCat(
        "look-around in Split pattern '", ToAbsl(pattern), "' (alternative '", ToAbsl(alternative),
        "', offset ", pos,
        ") is only supported as (?=A)/(?!A) over one character atom, inside a top-level "
        "alternative made of single-character atoms"));
  };
  std::vector<LookaheadItem> items;
  size_t i = 0;
  const size_t end = text.size();
  while (i < end) {
    LookaheadItem item;
    const bool positive = text.compare(i, 3, "(?=") == 0;
    if (positive || text.compare(i, 3, "(?!") == 0) {
      i += 3;
      ASSIGN_OR_RETURN(std::optional<Element> atom, translator.ReadAtom(&i, end));
      if (!atom || !atom->is_char_set || i >= end || text[i] != ')') return unsupported(i);
      ++i;
      item.kind = LookaheadItem::Kind::kLookahead;
      item.negative = !positive;
      item.atom_re2 = atom->Re2();
      items.push_back(std::move(item));
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<Element> atom, translator.ReadAtom(&i, end));
    if (!atom || !atom->is_char_set) return unsupported(i);
    item.atom_re2 = atom->Re2();
    ASSIGN_OR_RETURN(const bool quantified,
                     translator.ReadQuantifier(&i, end, &item.min, &item.max, &item.lazy));
    if (!quantified) item.min = item.max = 1;
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace pdspark::tokenizer
