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

// DeepSeek-LLM (V2-era) style: five Splits, a very long literal letter class, a line-anchored
// `\s+$`, then Digits. Universal character names keep the ranges exactly as in the real file
// (copying the literal characters through an NFC-normalizing tool would change U+1FDB, U+2126
// and U+212A into other code points and break the ranges).
TEST(PreTokenizerTest, DeepSeekLlmSequence) {
  const std::string letters =
      "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
      "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
      "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
      "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
      "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
      "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC"
      "\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
      "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
      "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE"
      "\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
      "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F"
      "\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2"
      "\U000118A0-\U000118DF\U0001E900-\U0001E943]+";
  const json config = {
      {"type", "Sequence"},
      {"pretokenizers",
       {testing::SplitJson("[\r\n]"),
        testing::SplitJson(letters),
        testing::SplitJson("\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+"),
        testing::SplitJson("\\s+$"),
        testing::SplitJson("[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"),
        {{"type", "Digits"}, {"individual_digits", true}}}}};
  auto pre = Make(config);
  ASSERT_NE(pre, nullptr);
  // Expected pieces checked with Python's `regex` module over the same patterns.
  EXPECT_EQ(pre->PreTokenize("Hello, world!\n\u03A3\u03CD\u03BD\u03BF\u03BB\u03BF 42 items  "),
            (Strings{"Hello", ",", " world", "!", "\n", "\u03A3\u03CD\u03BD\u03BF\u03BB\u03BF", " ",
                     "4", "2", " items", "  "}));
  EXPECT_EQ(pre->PreTokenize(
                "  \uFF28\uFF45\uFF4C\uFF4C\uFF4F\u3000\u4E16\u754C\uFF01 \uD55C\uAD6D\uC5B4"),
            (Strings{" ", " \uFF28\uFF45\uFF4C\uFF4C\uFF4F", "\u3000", "\u4E16\u754C", "\uFF01",
                     " ", "\uD55C\uAD6D\uC5B4"}));
  EXPECT_EQ(pre->PreTokenize("x12y  \n  z"), (Strings{"x", "1", "2", "y", "  ", "\n", " ", " z"}));
  // The odd U+0800-U+4E00 range isolates Greek Extended and letterlike symbols one by one.
  EXPECT_EQ(pre->PreTokenize("\u1F08\u03B8\u1FDB and \u01C5 \u212A"),
            (Strings{"\u1F08", "\u03B8", "\u1FDB", " and", " \u01C5", " ", "\u212A"}));
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
