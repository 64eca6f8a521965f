// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (DeepSeek-V3/V4 format, and
// the tiny model's tokenizer written by tools/train).
//
// Encode: added/special tokens are cut out first (leftmost-longest), each remaining segment is
// pre-tokenized (Split regexes + ByteLevel) and each piece is BPE-merged. Input must be valid
// UTF-8: anything else is rejected with InvalidArgument naming the byte offset of the first bad
// byte (the regex pre-tokenizer is defined over characters, and HF cannot take such input
// either), so Encode never guesses.
//
// Decode: tokens are concatenated in byte form (HF's ByteLevel decoder: a token made of GPT-2
// symbols becomes its bytes, any other token its UTF-8 content), then ill-formed UTF-8 is
// replaced by U+FFFD. Ids outside the vocabulary are skipped, as HF does.
//
// Loading is strict: an unsupported normalizer, decoder, model option or regex construct is an
// error naming it, and so is a vocabulary without all 256 byte symbols. The post_processor is
// ignored (BOS is added by Encode's add_bos). vocab_size() is the tokenizer's; a model config
// may pad its embedding beyond it (DeepSeek-V4: 129280).
//
// A Tokenizer is immutable after loading and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "common/base/status.h"
#include "common/tokenizer/added_vocabulary.h"
#include "common/tokenizer/bpe_model.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "nlohmann/json.hpp"

namespace pdspark::tokenizer {

struct TokenizerOptions {
  // Contents of the BOS / EOS tokens. Empty: taken from tokenizer_config.json next to the
  // tokenizer.json (FromFile only), else from well-known names such as
  // "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>", "<s>" / "</s>".
  std::string bos_token;
  std::string eos_token;
};

class Tokenizer {
 public:
  static constexpr int32_t kNoToken = -1;

  // `path` is a tokenizer.json file or a directory holding one.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path,
                                                       const TokenizerOptions& options = {});
  static StatusOr<std::unique_ptr<Tokenizer>> FromJsonString(std::string_view json,
                                                             const TokenizerOptions& options = {});
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(const nlohmann::json& json,
                                                       const TokenizerOptions& options = {});

  // Token ids of `text`, BOS first when `add_bos`. With parse_special false, special-token
  // strings in `text` are encoded as ordinary text (use it for untrusted user content).
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos = false,
                                        bool parse_special = true) const;

  std::string Decode(absl::Span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes a token stands for (may be a partial UTF-8 character); empty if unknown.
  std::string_view TokenBytes(int32_t id) const;

  // Vocabulary-form token string <-> id, over the model vocabulary and added tokens.
  StatusOr<int32_t> TokenToId(std::string_view token) const;
  StatusOr<std::string> IdToToken(int32_t id) const;

  // Id of an added token (special or not) by its content, e.g. "<｜dspark▁noise｜>".
  StatusOr<int32_t> SpecialTokenId(std::string_view content) const;
  bool IsSpecial(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

  int32_t bos_id() const { return bos_id_; }  // kNoToken when the tokenizer has none
  int32_t eos_id() const { return eos_id_; }

  // One past the largest id (the embedding rows needed); num_tokens() counts distinct ids.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t num_tokens() const { return num_tokens_; }

  const PreTokenizer& pre_tokenizer() const { return *pre_tokenizer_; }

 private:
  Tokenizer() = default;
  Status BuildIdTables();
  Status ResolveBosEos(const TokenizerOptions& options, const nlohmann::json* tokenizer_config);
  Status CheckByteAlphabet() const;
  Status EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedVocabulary added_;
  std::vector<std::string> id_to_token_;  // empty string: unused id
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> is_special_;
  int32_t num_tokens_ = 0;
  int32_t bos_id_ = kNoToken;
  int32_t eos_id_ = kNoToken;
};

}  // namespace pdspark::tokenizer
