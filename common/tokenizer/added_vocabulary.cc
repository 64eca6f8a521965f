#include "common/tokenizer/added_vocabulary.h"

#include "absl/strings/str_cat.h"
#include "common/base/strings.h"
#include "common/tokenizer/utf8.h"
#include "re2/re2.h"

namespace pdspark::tokenizer {
namespace {

using nlohmann::json;

// Rust's char::is_whitespace (the White_Space property), which lstrip/rstrip use.
bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool IsWordChar(std::string_view utf8_char) {
  static const re2::RE2* word = new re2::RE2("[\\p{L}\\p{M}\\p{Nd}\\p{Pc}]");
  return re2::RE2::FullMatch(utf8_char, *word);
}

// Start of the last character before `pos`.
size_t PreviousCharStart(std::string_view text, size_t pos) {
  size_t p = pos - 1;
  while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

bool IsWordCharBefore(std::string_view text, size_t pos) {
  if (pos == 0) return false;
  const size_t start = PreviousCharStart(text, pos);
  return IsWordChar(text.substr(start, pos - start));
}

bool IsWordCharAt(std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  return IsWordChar(text.substr(pos, Utf8CharLength(text, pos)));
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view key, int token_index) {
  first_byte_[static_cast<uint8_t>(key[0])] = true;
  int node = 0;
  for (char c : key) {
    const uint64_t edge = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
    auto [it, inserted] = edges_.try_emplace(edge, nodes_);
    if (inserted) {
      ++nodes_;
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  terminal_[node] = token_index;
}

int AddedVocabulary::Trie::LongestAt(std::string_view text, size_t pos, size_t* length) const {
  if (!first_byte_[static_cast<uint8_t>(text[pos])]) return -1;
  int best = -1;
  int node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint64_t edge = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]);
    const auto it = edges_.find(edge);
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = terminal_[node];
      *length = i + 1 - pos;
    }
  }
  return best;
}

StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const json& added_tokens) {
  AddedVocabulary vocab;
  if (added_tokens.is_null()) return vocab;
  try {
    for (const json& entry : added_tokens) {
      AddedToken token;
      token.id = entry.at("id").get<int32_t>();
      token.content = entry.at("content").get<std::string>();
      token.special = entry.value("special", false);
      token.normalized = entry.value("normalized", !token.special);
      token.lstrip = entry.value("lstrip", false);
      token.rstrip = entry.value("rstrip", false);
      token.single_word = entry.value("single_word", false);
      if (token.content.empty() || FindInvalidUtf8(token.content)) {
        return absl::InvalidArgumentError(
            absl::StrCat("added token ", token.id, " has empty or non-UTF-8 content"));
      }
      if (token.id < 0) return absl::InvalidArgumentError("added token with a negative id");
      const int index = static_cast<int>(vocab.tokens_.size());
      vocab.by_content_.try_emplace(token.content, index);
      vocab.by_id_.try_emplace(token.id, index);
      (token.normalized ? vocab.normalized_trie_ : vocab.raw_trie_).Insert(token.content, index);
      vocab.tokens_.push_back(std::move(token));
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad added_tokens: ", e.what()));
  }
  return vocab;
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  const auto it = by_content_.find(ToAbsl(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::SplitWith(const Trie& trie, std::string_view text, bool parse_special,
                                std::vector<Segment>* out) const {
  size_t emitted = 0;  // text before this offset is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    const int index = trie.LongestAt(text, pos, &length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;  // a rejected occurrence is consumed, as with HF's non-overlapping search
    if (token.special && !parse_special) continue;
    if (token.single_word && (IsWordCharBefore(text, start) || IsWordCharAt(text, stop))) continue;
    if (token.lstrip) {
      while (start > emitted) {
        const size_t prev = PreviousCharStart(text, start);
        const Utf8Step step = DecodeUtf8(text, prev);
        if (!step.valid || !IsWhitespace(step.code_point)) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        const Utf8Step step = DecodeUtf8(text, stop);
        if (!step.valid || !IsWhitespace(step.code_point)) break;
        stop += step.length;
      }
      pos = stop;
    }
    if (emitted < start) out->push_back({text.substr(emitted, start - emitted), -1});
    out->push_back({text.substr(start, stop - start), token.id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

std::vector<Segment> AddedVocabulary::Split(std::string_view text, bool parse_special) const {
  std::vector<Segment> first;
  if (raw_trie_.empty()) {
    if (!text.empty()) first.push_back({text, -1});
  } else {
    SplitWith(raw_trie_, text, parse_special, &first);
  }
  if (normalized_trie_.empty()) return first;
  std::vector<Segment> out;
  for (const Segment& segment : first) {
    if (segment.token_id >= 0) {
      out.push_back(segment);
    } else {
      SplitWith(normalized_trie_, segment.text, parse_special, &out);
    }
  }
  return out;
}

}  // namespace pdspark::tokenizer
