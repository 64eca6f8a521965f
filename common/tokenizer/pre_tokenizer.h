// The `pre_tokenizer` section of a HF tokenizer.json: a pipeline of steps, each of which splits
// every piece produced by the previous step (HF's PreTokenizedString semantics, so a Split
// regex never sees across a piece boundary: `$` and look-aheads stop at the piece end).
// Supported steps: Sequence, Split (Regex or String pattern, all five behaviours, invert),
// ByteLevel (maps bytes to GPT-2 symbols; optional prefix space and GPT-2 regex) and Digits.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace pdspark::tokenizer {

// Pieces as views; text a step creates (ByteLevel's symbols) lives in `storage`, whose
// elements never move, so splitting steps only slice views and copy nothing.
struct PieceBuffer {
  std::deque<std::string> storage;
  std::vector<std::string_view> pieces;
};

// One stage of the pipeline.
class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Appends the non-empty pieces `piece` splits into to out->pieces.
  virtual void Apply(std::string_view piece, PieceBuffer* out) const = 0;
};

class PreTokenizer {
 public:
  // `config` is the tokenizer.json `pre_tokenizer` value (null gives a pass-through).
  static StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& config);

  // Splits `text` into pieces; with a ByteLevel step they are in GPT-2 symbol form.
  std::vector<std::string> PreTokenize(std::string_view text) const;

  // As PreTokenize, into views valid while `buffer` and `text` live (the encoder's hot path).
  void PreTokenizeInto(std::string_view text, PieceBuffer* buffer) const;

  // Whether some step maps bytes to GPT-2 symbols (required for byte-level BPE).
  bool byte_level() const { return byte_level_; }

 private:
  PreTokenizer() = default;
  Status AddSteps(const nlohmann::json& config);

  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
  bool byte_level_ = false;
};

}  // namespace pdspark::tokenizer
