#include "common/tokenizer/pre_tokenizer.h"

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test_tokenizer_json.h"

namespace pdspark::tokenizer {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

std::unique_ptr<PreTokenizer> Make(const json& config) {
  auto pre = PreTokenizer::FromJson(config);
  EXPECT_TRUE(pre.ok()) << pre.status();
  return pre.ok() ? std::move(pre).value() : nullptr;
}

// DeepSeek-V3's three Splits without the ByteLevel step, so pieces stay readable.
json DeepSeekSplitsOnly() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {testing::SplitJson(testing::kDeepSeekDigits), testing::SplitJson(testing::kDeepSeekCjk),
            testing::SplitJson(testing::kDeepSeekMain)}}};
}

TEST(PreTokenizerTest, DeepSeekSequenceHandDerived) {
  auto pre = Make(DeepSeekSplitsOnly());
  ASSERT_NE(pre, nullptr);
  // Each Split runs on the pieces of the previous one: digits first (groups of three), then
  // CJK runs, then the GPT-4-style pattern.
  EXPECT_EQ(pre->PreTokenize("1234567"), (Strings{"123", "456", "7"}));
  EXPECT_EQ(pre->PreTokenize("12abc345"), (Strings{"12", "abc", "345"}));
  EXPECT_EQ(pre->PreTokenize("a  \n\n  b"), (Strings{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(pre->PreTokenize("中文abc日本語カタカナ"), (Strings{"中文", "abc", "日本語カタカナ"}));
  EXPECT_EQ(pre->PreTokenize("😀😀 ok"), (Strings{"😀😀", " ok"}));
  EXPECT_EQ(pre->PreTokenize("a\u3000\u3000b"), (Strings{"a", "\u3000", "\u3000b"}));
  EXPECT_EQ(pre->PreTokenize("x  "), (Strings{"x", "  "}));    // trailing spaces stay whole
  EXPECT_EQ(pre->PreTokenize("   a"), (Strings{"  ", " a"}));  // last space joins the word
  EXPECT_EQ(pre->PreTokenize(" \n x"), (Strings{" \n", " x"}));
  EXPECT_EQ(pre->PreTokenize("(\n\nfoo"), (Strings{"(\n\n", "foo"}));
  // The digit split isolates "2026" before the main pattern sees " ", so the space is alone.
  EXPECT_EQ(pre->PreTokenize("in 2026!"), (Strings{"in", " ", "202", "6", "!"}));
  EXPECT_EQ(pre->PreTokenize(""), Strings{});
}

TEST(PreTokenizerTest, DeepSeekSequenceMatchesReferenceEngine) {
  // Golden pieces from an independent backtracking engine (Python `regex`), see
  // tests/data/tokenizer/make_pretokenize_golden.py.
  auto pre = Make(DeepSeekSplitsOnly());
  ASSERT_NE(pre, nullptr);
  std::ifstream in(std::string(PDSPARK_SOURCE_DIR) +
                   "/tests/data/tokenizer/pretokenize_golden.jsonl");
  ASSERT_TRUE(in) << "missing golden file";
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    const std::string text = row.at("text").get<std::string>();
    EXPECT_EQ(pre->PreTokenize(text), row.at("pieces").get<Strings>())
        << "text: " << row.at("text");
    ++cases;
  }
  EXPECT_GE(cases, 300);
}

TEST(PreTokenizerTest, SplitBehaviors) {
  // The examples of HF's SplitDelimiterBehavior documentation.
  const std::string text = "the-final--countdown";
  auto with = [&](const char* behavior) {
    return Make(testing::SplitJson("-", behavior))->PreTokenize(text);
  };
  EXPECT_EQ(with("Removed"), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(with("Isolated"), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(with("MergedWithPrevious"), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(with("MergedWithNext"), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(with("Contiguous"), (Strings{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizerTest, InvertAndStringPatterns) {
  auto inverted = Make(testing::SplitJson("\\p{L}+", "Removed", /*invert=*/true));
  EXPECT_EQ(inverted->PreTokenize("ab 12 cd"), (Strings{"ab", "cd"}));
  json literal = {{"type", "Split"},
                  {"pattern", {{"String", "||"}}},
                  {"behavior", "Removed"},
                  {"invert", false}};
  EXPECT_EQ(Make(literal)->PreTokenize("a||b|c"), (Strings{"a", "b|c"}));
}

TEST(PreTokenizerTest, Digits) {
  auto individual = Make({{"type", "Digits"}, {"individual_digits", true}});
  EXPECT_EQ(individual->PreTokenize("ab123c"), (Strings{"ab", "1", "2", "3", "c"}));
  auto grouped = Make({{"type", "Digits"}, {"individual_digits", false}});
  EXPECT_EQ(grouped->PreTokenize("ab123c4"), (Strings{"ab", "123", "c", "4"}));
}

TEST(PreTokenizerTest, ByteLevelStep) {
  auto plain = Make(testing::ByteLevelJson(false, false));
  EXPECT_TRUE(plain->byte_level());
  EXPECT_EQ(plain->PreTokenize("a b\n"), (Strings{"aĠbĊ"}));
  auto gpt2 = Make(testing::ByteLevelJson(true, true));
  EXPECT_EQ(gpt2->PreTokenize("Hello world  it's"),
            (Strings{"ĠHello", "Ġworld", "Ġ", "Ġit", "'s"}));
  auto deepseek = Make(testing::DeepSeekV3PreTokenizer());
  EXPECT_EQ(deepseek->PreTokenize("Hi 世界"), (Strings{"Hi", "Ġ", "ä¸ĸçķĮ"}));
}

TEST(PreTokenizerTest, UnsupportedConfigsAreErrors) {
  EXPECT_FALSE(PreTokenizer::FromJson({{"type", "Metaspace"}}).ok());
  EXPECT_FALSE(PreTokenizer::FromJson(testing::SplitJson("a", "Sideways")).ok());
  auto bad = PreTokenizer::FromJson(testing::SplitJson("(?<=x)y"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("(?<=x)y"), std::string::npos);
  EXPECT_FALSE(PreTokenizer::FromJson({{"type", "Split"}}).ok());  // no pattern
  auto none = PreTokenizer::FromJson(json());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)->byte_level());
}

}  // namespace
}  // namespace pdspark::tokenizer
