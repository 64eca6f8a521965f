#include "common/tokenizer/split_regex.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/strings.h"
#include "common/tokenizer/utf8.h"
#include "re2/re2.h"

namespace pdspark::tokenizer {

StatusOr<std::unique_ptr<SplitRegex>> SplitRegex::Compile(std::string_view pattern) {
  ASSIGN_OR_RETURN(std::vector<PatternAlternative> alternatives, TranslateOnigPattern(pattern));
  std::unique_ptr<SplitRegex> regex(new SplitRegex());
  regex->pattern_ = std::string(pattern);
  std::vector<std::string> groups;
  for (int i = 0; i < static_cast<int>(alternatives.size()); ++i) {
    const PatternAlternative& alt = alternatives[i];
    if (!alt.has_lookaround) {
      groups.push_back(absl::StrCat("(", alt.re2, ")"));
      regex->regular_indices_.push_back(i);
      continue;
    }
    LookaheadAlternative la;
    la.index = i;
    ASSIGN_OR_RETURN(la.items, ParseLookaheadSequence(alt.source, pattern));
    for (const LookaheadItem& item : la.items) {
      auto set = CodePointSet::Compile(item.atom_re2);
      if (!set.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("cannot compile Split pattern '",
                                                       ToAbsl(pattern), "': ", set.status().message()));
      }
      la.sets.push_back(std::move(set).value());
    }
    regex->lookahead_.push_back(std::move(la));
  }
  if (!groups.empty()) {
    re2::RE2::Options options;
    options.set_log_errors(false);
    options.set_max_mem(64 << 20);  // DeepSeek's long literal letter classes need room
    regex->regular_ = std::make_unique<re2::RE2>(absl::StrJoin(groups, "|"), options);
    if (!regex->regular_->ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot compile Split pattern '", ToAbsl(pattern),
                                                     "': ", regex->regular_->error()));
    }
  }
  return regex;
}

SplitRegex::~SplitRegex() = default;

std::optional<size_t> SplitRegex::MatchItems(const LookaheadAlternative& alt, std::string_view text,
                                             size_t item, size_t pos) {
  if (item == alt.items.size()) return pos;
  const LookaheadItem& it = alt.items[item];
  const CodePointSet& set = *alt.sets[item];
  if (it.kind == LookaheadItem::Kind::kLookahead) {
    bool hit = false;
    if (pos < text.size()) {
      const Utf8Step step = DecodeUtf8(text, pos);
      hit = step.valid && set.Contains(step.code_point);
    }
    if (hit == it.negative) return std::nullopt;
    return MatchItems(alt, text, item + 1, pos);
  }
  // Collect the end offsets of 0..max repetitions, then backtrack over them.
  std::vector<size_t> ends = {pos};
  size_t p = pos;
  while (static_cast<int>(ends.size()) - 1 < it.max && p < text.size()) {
    const Utf8Step step = DecodeUtf8(text, p);
    if (!step.valid || !set.Contains(step.code_point)) break;
    p += step.length;
    ends.push_back(p);
  }
  const int count = static_cast<int>(ends.size()) - 1;
  if (count < it.min) return std::nullopt;
  for (int k = it.lazy ? it.min : count; it.lazy ? k <= count : k >= it.min;
       k += it.lazy ? 1 : -1) {
    if (auto end = MatchItems(alt, text, item + 1, ends[k])) return end;
  }
  return std::nullopt;
}

int SplitRegex::RegularAlternativeAt(std::string_view text, size_t pos) const {
  const int n = static_cast<int>(regular_indices_.size());
  std::vector<re2::StringPiece> groups(n + 1);
  if (!regular_->Match(text, pos, text.size(), re2::RE2::ANCHOR_START, groups.data(), n + 1)) {
    return -1;
  }
  for (int i = 0; i < n; ++i) {
    if (groups[i + 1].data() != nullptr) return regular_indices_[i];
  }
  return -1;
}

std::optional<SplitRegex::Match> SplitRegex::FindFrom(std::string_view text, size_t start) const {
  std::optional<Match> best;
  if (regular_) {
    re2::StringPiece whole;
    if (regular_->Match(text, start, text.size(), re2::RE2::UNANCHORED, &whole, 1)) {
      const size_t begin = whole.data() - text.data();
      best = Match{begin, begin + whole.size(), -1};
    }
  }
  for (const LookaheadAlternative& alt : lookahead_) {
    // Only positions up to the best match so far can win.
    const size_t limit = best ? best->begin : text.size();
    for (size_t p = start; p <= limit;) {
      if (std::optional<size_t> end = MatchItems(alt, text, 0, p)) {
        if (!best || p < best->begin) {
          best = Match{p, *end, alt.index};
        } else {  // same position: the earlier alternative wins
          if (best->alternative < 0) best->alternative = RegularAlternativeAt(text, p);
          if (alt.index < best->alternative) best = Match{p, *end, alt.index};
        }
        break;
      }
      if (p == text.size()) break;
      p += Utf8CharLength(text, p);
    }
  }
  return best;
}

std::vector<std::pair<size_t, size_t>> SplitRegex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  size_t search_from = 0;
  std::optional<size_t> last_match_end;
  while (search_from <= text.size()) {
    const std::optional<Match> m = FindFrom(text, search_from);
    if (!m) break;
    if (m->begin == m->end && last_match_end == m->end) {
      // Oniguruma's iterator skips an empty match glued to the previous match.
      search_from += search_from < text.size() ? Utf8CharLength(text, search_from) : 1;
      continue;
    }
    matches.emplace_back(m->begin, m->end);
    search_from = m->end;
    last_match_end = m->end;
  }
  return matches;
}

}  // namespace pdspark::tokenizer
