// TextCodec over the project's tokenizer (common/tokenizer), loaded from the model directory's
// tokenizer.json.
#pragma once

#include <memory>
#include <string>

#include "common/tokenizer/tokenizer.h"
#include "router/text_codec.h"

namespace pdspark::router {

class TokenizerTextCodec : public TextCodec {
 public:
  static StatusOr<std::unique_ptr<TokenizerTextCodec>> Load(const std::string& model_dir);

  explicit TokenizerTextCodec(std::unique_ptr<tokenizer::Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)) {}

  StatusOr<std::vector<uint32_t>> Encode(std::string_view text, bool parse_special) const override;
  std::unique_ptr<StreamDetokenizer> NewDetokenizer(bool skip_special_tokens) const override;
  std::optional<uint32_t> bos_token_id() const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(tokenizer_->vocab_size()); }

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

}  // namespace pdspark::router
