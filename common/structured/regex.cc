#include "common/structured/regex.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"

namespace pdspark::structured {
namespace {

using Bytes = std::bitset<256>;
using Kind = RegexNfa::State::Kind;

// The parsed pattern, before it becomes states (a repeat emits its operand several times).
struct Ast {
  enum class Type { kBytes, kConcat, kAlternation, kRepeat };
  Type type = Type::kConcat;
  Bytes bytes;
  std::vector<std::unique_ptr<Ast>> children;
  int min = 0, max = -1;  // kRepeat; max -1: unbounded
};

Bytes Range(char lo, char hi) {
  Bytes b;
  for (int c = static_cast<uint8_t>(lo); c <= static_cast<uint8_t>(hi); ++c) b.set(c);
  return b;
}

Bytes Of(std::string_view chars) {
  Bytes b;
  for (char c : chars) b.set(static_cast<uint8_t>(c));
  return b;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  StatusOr<std::unique_ptr<Ast>> Parse() {
    if (!p_.empty() && p_.front() == '^') ++i_;
    std::string_view body = p_;
    if (body.size() > i_ && body.back() == '$' &&
        (body.size() < 2 || body[body.size() - 2] != '\\')) {
      p_ = body.substr(0, body.size() - 1);
    }
    ASSIGN_OR_RETURN(auto ast, Alternation());
    if (i_ != p_.size()) return Error(absl::StrCat("unexpected '", std::string(1, p_[i_]), "'"));
    return ast;
  }

 private:
  Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("guided_regex at offset ", i_, ": ", what));
  }
  bool More() const { return i_ < p_.size(); }

  StatusOr<std::unique_ptr<Ast>> Alternation() {
    auto alt = std::make_unique<Ast>();
    alt->type = Ast::Type::kAlternation;
    while (true) {
      ASSIGN_OR_RETURN(auto branch, Concat());
      alt->children.push_back(std::move(branch));
      if (!More() || p_[i_] != '|') break;
      ++i_;
    }
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  StatusOr<std::unique_ptr<Ast>> Concat() {
    auto concat = std::make_unique<Ast>();
    while (More() && p_[i_] != '|' && p_[i_] != ')') {
      ASSIGN_OR_RETURN(auto atom, Atom());
      ASSIGN_OR_RETURN(atom, Quantified(std::move(atom)));
      concat->children.push_back(std::move(atom));
    }
    return concat;
  }

  StatusOr<std::unique_ptr<Ast>> Quantified(std::unique_ptr<Ast> atom) {
    while (More()) {
      int min = 0, max = -1;
      const char c = p_[i_];
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{' && i_ + 1 < p_.size() && isdigit(p_[i_ + 1])) {
        ++i_;
        min = Number();
        max = min;
        if (More() && p_[i_] == ',') {
          ++i_;
          max = More() && isdigit(p_[i_]) ? Number() : -1;
        }
        if (!More() || p_[i_] != '}') return Error("unclosed '{'");
        ++i_;
        if (max >= 0 && max < min) return Error("a repeat's maximum below its minimum");
        if (std::max(min, max) > 1000) return Error("repeats above 1000");
      } else {
        return atom;
      }
      if (More() && (p_[i_] == '?' || p_[i_] == '+')) {
        return Error("lazy and possessive quantifiers are not supported");
      }
      auto repeat = std::make_unique<Ast>();
      repeat->type = Ast::Type::kRepeat;
      repeat->min = min;
      repeat->max = max;
      repeat->children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  int Number() {
    int n = 0;
    while (More() && isdigit(p_[i_]) && n <= 100000) n = n * 10 + (p_[i_++] - '0');
    return n;
  }

  StatusOr<std::unique_ptr<Ast>> Atom() {
    const char c = p_[i_++];
    if (c == '(') {
      if (More() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return Error("lookarounds, named groups and flags are not supported");
        }
      }
      ASSIGN_OR_RETURN(auto inner, Alternation());
      if (!More() || p_[i_] != ')') return Error("unclosed '('");
      ++i_;
      return inner;
    }
    auto atom = std::make_unique<Ast>();
    atom->type = Ast::Type::kBytes;
    if (c == '.') {
      atom->bytes.set();
      atom->bytes.reset('\n');
    } else if (c == '[') {
      ASSIGN_OR_RETURN(atom->bytes, Class());
    } else if (c == '\\') {
      ASSIGN_OR_RETURN(atom->bytes, Escape());
    } else if (c == '*' || c == '+' || c == '?') {
      return Error("a quantifier with nothing to repeat");
    } else {
      atom->bytes.set(static_cast<uint8_t>(c));
    }
    return atom;
  }

  StatusOr<Bytes> Escape() {
    if (!More()) return Error("a pattern ending in '\\'");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return Range('0', '9');
      case 'D':
        return ~Range('0', '9');
      case 'w':
        return Range('a', 'z') | Range('A', 'Z') | Range('0', '9') | Of("_");
      case 'W':
        return ~(Range('a', 'z') | Range('A', 'Z') | Range('0', '9') | Of("_"));
      case 's':
        return Of(" \t\n\r\f\v");
      case 'S':
        return ~Of(" \t\n\r\f\v");
      case 'n':
        return Of("\n");
      case 't':
        return Of("\t");
      case 'r':
        return Of("\r");
      case 'f':
        return Of("\f");
      case 'v':
        return Of("\v");
      default:
        if (isalnum(static_cast<unsigned char>(c))) {
          return Error(absl::StrCat("the escape \\", std::string(1, c), " is not supported"));
        }
        return Of(std::string_view(&c, 1));
    }
  }

  StatusOr<Bytes> Class() {
    Bytes bytes;
    const bool negate = More() && p_[i_] == '^';
    if (negate) ++i_;
    bool first = true;
    while (More() && (p_[i_] != ']' || first)) {
      first = false;
      Bytes item;
      char lo = p_[i_++];
      if (lo == '\\') {
        ASSIGN_OR_RETURN(item, Escape());
        bytes |= item;
        continue;
      }
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        char hi = p_[i_ + 1];
        i_ += 2;
        if (hi == '\\') {
          if (!More()) return Error("a pattern ending in '\\'");
          hi = p_[i_++];
        }
        if (static_cast<uint8_t>(hi) < static_cast<uint8_t>(lo)) return Error("a reversed range");
        bytes |= Range(lo, hi);
      } else {
        bytes.set(static_cast<uint8_t>(lo));
      }
    }
    if (!More()) return Error("unclosed '['");
    ++i_;
    return negate ? ~bytes : bytes;
  }

  std::string_view p_;
  size_t i_ = 0;
};

// Thompson's construction: each fragment has a start and the states whose exits are still open.
class Builder {
 public:
  explicit Builder(RegexNfa& nfa) : nfa_(nfa) {}

  struct Fragment {
    int32_t start;
    std::vector<std::pair<int32_t, bool>> open;  // (state, its second exit)
  };

  StatusOr<Fragment> Emit(const Ast& ast) {
    switch (ast.type) {
      case Ast::Type::kBytes: {
        ASSIGN_OR_RETURN(int32_t s, Add(Kind::kBytes));
        nfa_.states[s].bytes = ast.bytes;
        return Fragment{s, {{s, false}}};
      }
      case Ast::Type::kConcat: {
        if (ast.children.empty()) return Empty();
        ASSIGN_OR_RETURN(Fragment whole, Emit(*ast.children[0]));
        for (size_t i = 1; i < ast.children.size(); ++i) {
          ASSIGN_OR_RETURN(Fragment next, Emit(*ast.children[i]));
          Patch(whole.open, next.start);
          whole.open = std::move(next.open);
        }
        return whole;
      }
      case Ast::Type::kAlternation: {
        ASSIGN_OR_RETURN(Fragment whole, Emit(*ast.children[0]));
        for (size_t i = 1; i < ast.children.size(); ++i) {
          ASSIGN_OR_RETURN(Fragment next, Emit(*ast.children[i]));
          ASSIGN_OR_RETURN(int32_t split, Add(Kind::kSplit));
          nfa_.states[split].out = whole.start;
          nfa_.states[split].out2 = next.start;
          whole.start = split;
          whole.open.insert(whole.open.end(), next.open.begin(), next.open.end());
        }
        return whole;
      }
      case Ast::Type::kRepeat:
        return Repeat(ast);
    }
    return Empty();
  }

  // Points the open exits at `to`.
  void Patch(const std::vector<std::pair<int32_t, bool>>& open, int32_t to) {
    for (const auto& [state, second] : open) {
      (second ? nfa_.states[state].out2 : nfa_.states[state].out) = to;
    }
  }

 private:
  StatusOr<int32_t> Add(Kind kind) {
    if (nfa_.states.size() >= static_cast<size_t>(kMaxRegexStates)) {
      return absl::InvalidArgumentError(
          absl::StrCat("guided_regex is too large (more than ", kMaxRegexStates, " states)"));
    }
    nfa_.states.push_back({kind});
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }

  // Matches nothing, moves on: a split whose both exits go the same way.
  StatusOr<Fragment> Empty() {
    ASSIGN_OR_RETURN(int32_t s, Add(Kind::kSplit));
    return Fragment{s, {{s, false}, {s, true}}};
  }

  // x{min,max}: min copies, then max - min optional ones (or a loop when unbounded).
  StatusOr<Fragment> Repeat(const Ast& ast) {
    const Ast& operand = *ast.children[0];
    ASSIGN_OR_RETURN(Fragment whole, Empty());
    for (int i = 0; i < ast.min; ++i) {
      ASSIGN_OR_RETURN(Fragment copy, Emit(operand));
      Patch(whole.open, copy.start);
      whole.open = std::move(copy.open);
    }
    if (ast.max < 0) {
      ASSIGN_OR_RETURN(int32_t split, Add(Kind::kSplit));
      ASSIGN_OR_RETURN(Fragment body, Emit(operand));
      nfa_.states[split].out = body.start;
      Patch(body.open, split);
      Patch(whole.open, split);
      whole.open = {{split, true}};
      return whole;
    }
    for (int i = ast.min; i < ast.max; ++i) {
      ASSIGN_OR_RETURN(int32_t split, Add(Kind::kSplit));
      ASSIGN_OR_RETURN(Fragment copy, Emit(operand));
      nfa_.states[split].out = copy.start;
      Patch(whole.open, split);
      whole.open = std::move(copy.open);
      whole.open.push_back({split, true});
    }
    return whole;
  }

  RegexNfa& nfa_;
};

}  // namespace

StatusOr<RegexNfa> RegexNfa::Compile(std::string_view pattern) {
  ASSIGN_OR_RETURN(auto ast, Parser(pattern).Parse());
  RegexNfa nfa;
  Builder builder(nfa);
  ASSIGN_OR_RETURN(Builder::Fragment whole, builder.Emit(*ast));
  nfa.states.push_back({Kind::kMatch});
  builder.Patch(whole.open, static_cast<int32_t>(nfa.states.size() - 1));
  nfa.start = whole.start;
  return nfa;
}

void RegexNfa::Closure(int32_t state, std::vector<int32_t>& out) const {
  std::vector<int32_t> stack = {state};
  std::vector<bool> seen(states.size(), false);
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (s < 0 || seen[s]) continue;
    seen[s] = true;
    if (states[s].kind == Kind::kSplit) {
      stack.push_back(states[s].out2);
      stack.push_back(states[s].out);
    } else {
      out.push_back(s);
    }
  }
}

}  // namespace pdspark::structured
