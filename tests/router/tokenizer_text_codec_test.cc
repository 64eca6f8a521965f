// The router's TextCodec over the project tokenizer, with the bundled tiny model's tokenizer:
// the chat template's special tokens must become single ids, and streaming detokenization must
// give back the text.
#include "router/tokenizer_text_codec.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "router/chat_template.h"

namespace pdspark::router {
namespace {

class TokenizerTextCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto codec = TokenizerTextCodec::Load(std::string(PDSPARK_SOURCE_DIR) +
                                          "/models/tiny-dsv4-dspark");
    ASSERT_TRUE(codec.ok()) << codec.status();
    codec_ = *std::move(codec);
  }
  std::string Detokenize(const std::vector<uint32_t>& ids, bool skip_special) {
    auto d = codec_->NewDetokenizer(skip_special);
    std::string text;
    for (uint32_t id : ids) text += d->Push(id);
    return text + d->Flush();
  }
  std::unique_ptr<TokenizerTextCodec> codec_;
};

TEST_F(TokenizerTextCodecTest, ChatTemplateSpecialTokensAreSingleIds) {
  auto prompt = EncodeDeepSeekV4Chat({{"user", "ROMEO: hello", ""}}, {});
  ASSERT_TRUE(prompt.ok());
  auto ids = codec_->Encode(*prompt, /*parse_special=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE(codec_->bos_token_id().has_value());
  EXPECT_EQ(ids->front(), *codec_->bos_token_id());
  auto user = codec_->Encode(kUserToken, true);
  auto assistant = codec_->Encode(kAssistantToken, true);
  ASSERT_EQ(user->size(), 1u);
  ASSERT_EQ(assistant->size(), 1u);
  EXPECT_EQ((*ids)[1], (*user)[0]);
  EXPECT_NE(std::find(ids->begin(), ids->end(), (*assistant)[0]), ids->end());
  EXPECT_EQ(Detokenize(*ids, /*skip_special=*/false), *prompt);
  // Without parsing, the marker is ordinary text (several tokens).
  EXPECT_GT(codec_->Encode(kUserToken, false)->size(), 1u);
}

TEST_F(TokenizerTextCodecTest, StreamingDetokenizationRoundTrips) {
  const std::string text = "ROMEO: But soft, what light through yonder window breaks? é ü";
  auto ids = codec_->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(Detokenize(*ids, true), text);
  std::vector<uint32_t> with_bos = *ids;
  with_bos.insert(with_bos.begin(), *codec_->bos_token_id());
  EXPECT_EQ(Detokenize(with_bos, /*skip_special=*/true), text);
}

}  // namespace
}  // namespace pdspark::router
