#include "common/tokenizer/pre_tokenizer.h"

#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/split_regex.h"
#include "common/base/strings.h"

namespace pdspark::tokenizer {
namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel applies itself when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

StatusOr<Behavior> ParseBehavior(const std::string& name) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("unknown Split behavior '", name, "'"));
}

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// HF's Pattern::find_matches: matches and the gaps between them, covering the whole piece.
std::vector<Span> MatchesAndGaps(const std::vector<std::pair<size_t, size_t>>& matches,
                                 size_t size) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  }
  if (prev != size) spans.push_back({prev, size, false});
  return spans;
}

// HF's SplitDelimiterBehavior, applied to matches-and-gaps spans.
std::vector<Span> ApplyBehavior(std::vector<Span> spans, Behavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      return spans;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.push_back(s);
      }
      return out;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (!out.empty() && s.is_match == previous_match) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
  }
  return spans;
}

class SplitStep : public PreTokenizerStep {
 public:
  SplitStep(std::unique_ptr<SplitRegex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void Apply(std::string_view piece, PieceBuffer* out) const override {
    std::vector<Span> spans = MatchesAndGaps(regex_->FindAll(piece), piece.size());
    if (invert_) {
      for (Span& s : spans) s.is_match = !s.is_match;
    }
    for (const Span& s : ApplyBehavior(std::move(spans), behavior_)) {
      if (s.end > s.begin) out->pieces.push_back(piece.substr(s.begin, s.end - s.begin));
    }
  }

 private:
  std::unique_ptr<SplitRegex> regex_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelStep : public PreTokenizerStep {
 public:
  ByteLevelStep(bool add_prefix_space, std::unique_ptr<SplitRegex> gpt2)
      : add_prefix_space_(add_prefix_space), gpt2_(std::move(gpt2)) {}

  void Apply(std::string_view piece, PieceBuffer* out) const override {
    std::string prefixed;
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      prefixed = absl::StrCat(" ", ToAbsl(piece));
      piece = prefixed;
    }
    auto emit = [out](std::string_view bytes) {
      out->storage.push_back(BytesToSymbols(bytes));
      out->pieces.push_back(out->storage.back());
    };
    if (!gpt2_) {
      emit(piece);
      return;
    }
    std::vector<Span> spans = MatchesAndGaps(gpt2_->FindAll(piece), piece.size());
    for (const Span& s : spans) {
      if (s.end > s.begin) emit(piece.substr(s.begin, s.end - s.begin));
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitRegex> gpt2_;  // null unless use_regex
};

std::string EscapeLiteral(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<uint8_t>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

StatusOr<std::unique_ptr<PreTokenizerStep>> MakeSplit(const json& config) {
  const json& pattern = config.at("pattern");
  std::string regex;
  if (pattern.contains("Regex")) {
    regex = pattern.at("Regex").get<std::string>();
  } else if (pattern.contains("String")) {
    const std::string literal = pattern.at("String").get<std::string>();
    if (literal.empty()) return absl::InvalidArgumentError("Split with an empty String pattern");
    regex = EscapeLiteral(literal);
  } else {
    return absl::InvalidArgumentError("Split pattern needs a Regex or String");
  }
  ASSIGN_OR_RETURN(const Behavior behavior,
                   ParseBehavior(config.at("behavior").get<std::string>()));
  ASSIGN_OR_RETURN(std::unique_ptr<SplitRegex> compiled, SplitRegex::Compile(regex));
  return std::unique_ptr<PreTokenizerStep>(
      new SplitStep(std::move(compiled), behavior, config.value("invert", false)));
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const json& config) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  try {
    RETURN_IF_ERROR(pre->AddSteps(config));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad pre_tokenizer: ", e.what()));
  }
  return pre;
}

Status PreTokenizer::AddSteps(const json& config) {
  if (config.is_null()) return absl::OkStatus();
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& step : config.at("pretokenizers")) RETURN_IF_ERROR(AddSteps(step));
    return absl::OkStatus();
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizerStep> step, MakeSplit(config));
    steps_.push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    std::unique_ptr<SplitRegex> gpt2;
    if (config.value("use_regex", true)) {
      ASSIGN_OR_RETURN(gpt2, SplitRegex::Compile(kGpt2Pattern));
    }
    steps_.push_back(
        std::make_unique<ByteLevelStep>(config.value("add_prefix_space", true), std::move(gpt2)));
    byte_level_ = true;
    return absl::OkStatus();
  }
  if (type == "Digits") {
    // Digits splits on char::is_numeric, i.e. \p{N}; grouped runs unless individual_digits.
    ASSIGN_OR_RETURN(std::unique_ptr<SplitRegex> digits, SplitRegex::Compile("\\p{N}"));
    const Behavior behavior =
        config.value("individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous;
    steps_.push_back(std::make_unique<SplitStep>(std::move(digits), behavior, false));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat("unsupported pre_tokenizer type '", type, "'"));
}

void PreTokenizer::PreTokenizeInto(std::string_view text, PieceBuffer* buffer) const {
  buffer->pieces.clear();
  if (!text.empty()) buffer->pieces.push_back(text);
  std::vector<std::string_view> current;
  for (const auto& step : steps_) {
    current.swap(buffer->pieces);
    buffer->pieces.clear();
    for (const std::string_view piece : current) step->Apply(piece, buffer);
  }
}

std::vector<std::string> PreTokenizer::PreTokenize(std::string_view text) const {
  PieceBuffer buffer;
  PreTokenizeInto(text, &buffer);
  return {buffer.pieces.begin(), buffer.pieces.end()};
}

}  // namespace pdspark::tokenizer
