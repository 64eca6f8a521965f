#include "router/tokenizer_text_codec.h"

#include "common/tokenizer/incremental_detokenizer.h"

namespace pdspark::router {
namespace {

class Detokenizer : public StreamDetokenizer {
 public:
  Detokenizer(const tokenizer::Tokenizer* t, bool skip_special) : inner_(t, skip_special) {}
  std::string Push(uint32_t id) override { return inner_.Feed(static_cast<int32_t>(id)); }
  std::string Flush() override { return inner_.Flush(); }

 private:
  tokenizer::IncrementalDetokenizer inner_;
};

}  // namespace

StatusOr<std::unique_ptr<TokenizerTextCodec>> TokenizerTextCodec::Load(
    const std::string& model_dir) {
  ASSIGN_OR_RETURN(auto t, tokenizer::Tokenizer::FromFile(model_dir));
  return std::make_unique<TokenizerTextCodec>(std::move(t));
}

StatusOr<std::vector<uint32_t>> TokenizerTextCodec::Encode(std::string_view text,
                                                           bool parse_special) const {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   tokenizer_->Encode(text, /*add_bos=*/false, parse_special));
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

std::unique_ptr<StreamDetokenizer> TokenizerTextCodec::NewDetokenizer(
    bool skip_special_tokens) const {
  return std::make_unique<Detokenizer>(tokenizer_.get(), skip_special_tokens);
}

std::optional<uint32_t> TokenizerTextCodec::bos_token_id() const {
  if (tokenizer_->bos_id() == tokenizer::Tokenizer::kNoToken) return std::nullopt;
  return static_cast<uint32_t>(tokenizer_->bos_id());
}

}  // namespace pdspark::router
