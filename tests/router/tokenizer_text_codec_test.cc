// The router's TextCodec over the project tokenizer, with the bundled tiny model's tokenizer:
// the chat template's special tokens must become single ids, and streaming detokenization must
// give back the text; bad_words become the token sequences the engine bans.
#include "router/tokenizer_text_codec.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "router/chat_template.h"
#include "router/sampling_tokens.h"

namespace pdspark::router {
namespace {

class TokenizerTextCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto codec =
        TokenizerTextCodec::Load(std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark");
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

// vLLM's bad_words: each word as written and after a space; ids checked against the vocabulary.
TEST_F(TokenizerTextCodecTest, BadWordsBecomeTokenSequencesAndIdsAreChecked) {
  SamplingOptions sampling;
  sampling.bad_words = {"  window", "window"};
  ASSERT_FALSE(ResolveSamplingTokens(*codec_, &sampling).has_value());
  const auto bare = codec_->Encode("window", false).value();
  const auto spaced = codec_->Encode(" window", false).value();
  ASSERT_NE(bare, spaced);
  EXPECT_EQ(sampling.bad_words_ids, (std::vector<std::vector<uint32_t>>{bare, spaced}));

  SamplingOptions bias;
  bias.logit_bias = {{codec_->vocab_size(), 1.0}};
  auto error = ResolveSamplingTokens(*codec_, &bias, "sampling.");
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "sampling.logit_bias");
  SamplingOptions words;
  words.bad_words_ids = {{1, codec_->vocab_size() + 5}};
  error = ResolveSamplingTokens(*codec_, &words);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "bad_words");
}

}  // namespace
}  // namespace pdspark::router
