#include "common/tokenizer/incremental_detokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "test_tokenizer_json.h"

namespace pdspark::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t B(uint8_t c) { return testing::kByteBase + c; }

std::unique_ptr<Tokenizer> Make() {
  // "😀" = F0 9F 98 80; the merge makes a token of its first three bytes.
  auto t = Tokenizer::FromJson(testing::MakeTokenizerJson(
      {{"\xF0", "\x9F"}, {"\xF0\x9F", "\x98"}, {"h", "i"}, {"\xE4", "\xB8"}}));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}
constexpr int32_t kEmojiHead = 267;
constexpr int32_t kHi = 268;
constexpr int32_t kCjkHead = 269;  // E4 B8

TEST(IncrementalDetokenizerTest, HoldsBackASplitCharacter) {
  auto t = Make();
  IncrementalDetokenizer detok(t.get());
  EXPECT_EQ(detok.Feed(kHi), "hi");
  EXPECT_EQ(detok.Feed(kEmojiHead), "");
  EXPECT_EQ(detok.pending_bytes(), 3u);
  EXPECT_EQ(detok.Feed(B(0x80)), "😀");
  EXPECT_EQ(detok.Feed(kCjkHead), "");
  EXPECT_EQ(detok.Feed(B(0x96)), "世");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, BrokenSequencesBecomeReplacementChars) {
  auto t = Make();
  IncrementalDetokenizer detok(t.get());
  EXPECT_EQ(detok.Feed(kEmojiHead), "");
  EXPECT_EQ(detok.Feed(B('x')), "\xEF\xBF\xBDx");  // the partial emoji can no longer complete
  EXPECT_EQ(detok.Feed(kCjkHead), "");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");  // dangling at the end
  EXPECT_EQ(detok.pending_bytes(), 0u);
  EXPECT_EQ(detok.Feed(B(0xFF)), "\xEF\xBF\xBD");  // never valid: emitted at once
}

TEST(IncrementalDetokenizerTest, SkipsSpecialTokensWhenAsked) {
  auto t = Make();
  IncrementalDetokenizer skipping(t.get(), /*skip_special=*/true);
  EXPECT_EQ(skipping.Feed(0), "");
  EXPECT_EQ(skipping.Feed(kHi), "hi");
  EXPECT_EQ(skipping.Feed(3), "<think>");  // not special
  IncrementalDetokenizer keeping(t.get());
  EXPECT_EQ(keeping.Feed(1), testing::kEos);
  EXPECT_EQ(keeping.Feed(-1), "");  // unknown id
}

TEST(IncrementalDetokenizerTest, StreamEqualsFullDecodeAndIsAlwaysValidUtf8) {
  auto t = Make();
  std::mt19937 rng(7);
  // Mostly bytes of real multi-byte text, plus random byte tokens and merged heads.
  const std::string sample = "héllo 世界 😀 👍🏽 ж 한국어 ½";
  for (int trial = 0; trial < 2000; ++trial) {
    Ids ids;
    const int n = std::uniform_int_distribution<int>(0, 24)(rng);
    for (int i = 0; i < n; ++i) {
      const int pick = static_cast<int>(rng() % 10);
      if (pick < 6) {
        ids.push_back(B(static_cast<uint8_t>(sample[rng() % sample.size()])));
      } else if (pick < 8) {
        ids.push_back(B(static_cast<uint8_t>(rng() % 256)));
      } else {
        ids.push_back(static_cast<int32_t>(rng() % 4 == 0 ? rng() % 4 : 266 + rng() % 4));
      }
    }
    IncrementalDetokenizer detok(t.get());
    std::string streamed;
    for (int32_t id : ids) {
      const std::string delta = detok.Feed(id);
      ASSERT_FALSE(FindInvalidUtf8(delta).has_value()) << "trial " << trial;
      streamed += delta;
    }
    const std::string tail = detok.Flush();
    ASSERT_FALSE(FindInvalidUtf8(tail).has_value());
    streamed += tail;
    ASSERT_EQ(streamed, t->Decode(ids)) << "trial " << trial;
  }
}

TEST(IncrementalDetokenizerTest, StreamsEncodedTextBack) {
  auto t = Make();
  const std::string text = "hi 😀😀 世界 done";
  const auto ids = t->Encode(text);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(t.get());
  std::string streamed;
  for (int32_t id : *ids) streamed += detok.Feed(id);
  streamed += detok.Flush();
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace pdspark::tokenizer
