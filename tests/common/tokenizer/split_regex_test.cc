#include "common/tokenizer/split_regex.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "test_tokenizer_json.h"

namespace pdspark::tokenizer {
namespace {

// Matched substrings of FindAll, for readable expectations.
std::vector<std::string> Matches(std::string_view pattern, std::string_view text) {
  auto regex = SplitRegex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  if (!regex.ok()) return {};
  std::vector<std::string> out;
  for (const auto& [begin, end] : (*regex)->FindAll(text)) {
    out.emplace_back(text.substr(begin, end - begin));
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(SplitRegexTest, LeftmostFirstAlternation) {
  // Perl/Oniguruma order, not POSIX longest: "ab" is tried before "abc".
  EXPECT_EQ(Matches("ab|abc", "abcab"), (Strings{"ab", "ab"}));
  EXPECT_EQ(Matches("\\p{N}{1,3}", "1234567"), (Strings{"123", "456", "7"}));
}

TEST(SplitRegexTest, NegativeLookaheadWhitespace) {
  // \s+(?!\S) backtracks to leave the last space for the following word.
  EXPECT_EQ(Matches("\\s+(?!\\S)|\\s+", "a   b"), (Strings{"  ", " "}));
  EXPECT_EQ(Matches("\\s+(?!\\S)|\\s+", "a   "), (Strings{"   "}));  // end of text is not \S
  EXPECT_EQ(Matches("\\s+(?!\\S)|\\s+", " b"), (Strings{" "}));      // falls to \s+
  EXPECT_EQ(Matches("\\s+(?!\\S)", "a b  c"), (Strings{" "}));       // single space never
  EXPECT_EQ(Matches("\\s+(?=\\S)", "  x"), (Strings{"  "}));
  EXPECT_EQ(Matches("\\s+?(?!\\S)", "   x"), (Strings{" ", " "}));  // lazy: shortest success
}

TEST(SplitRegexTest, LookaheadAlternativeOrderIsRespected) {
  // At the same position the earlier alternative wins, whichever engine runs it.
  EXPECT_EQ(Matches("\\s+|\\s+(?!\\S)", "a   b"), (Strings{"   "}));
  EXPECT_EQ(Matches("\\s+(?!\\S)|\\s+", "a   b"), (Strings{"  ", " "}));
  // An earlier-starting regular match beats a later look-ahead match.
  EXPECT_EQ(Matches("x|\\s+(?!\\S)", "x  "), (Strings{"x", "  "}));
}

TEST(SplitRegexTest, UnicodeAwareClassEscapes) {
  // Oniguruma's \s covers U+3000 and NBSP (RE2's own \s would not).
  EXPECT_EQ(Matches("\\s+", "a\u3000\u00A0b"), (Strings{"\u3000\u00A0"}));
  EXPECT_EQ(Matches("\\S+", "a\u3000b"), (Strings{"a", "b"}));
  EXPECT_EQ(Matches("\\d+", "x٣4y"), (Strings{"٣4"}));
  EXPECT_EQ(Matches("\\w+", "héllo wörld_1"), (Strings{"héllo", "wörld_1"}));
  EXPECT_EQ(Matches("[\\s,]+", "a, \u3000b"), (Strings{", \u3000"}));
}

TEST(SplitRegexTest, OnigurumaSyntaxDetails) {
  EXPECT_EQ(Matches("a{,2}", "aaa"), (Strings{"aa", "a"}));          // {,n} means {0,n}
  EXPECT_EQ(Matches("a{x", "a{x"), (Strings{"a{x"}));                // not an interval: literal
  EXPECT_EQ(Matches("\\s+$", "ab  \ncd  "), (Strings{"  ", "  "}));  // $ is a line anchor
  EXPECT_EQ(Matches("(?i:'s|'t)", "IT'S it't"), (Strings{"'S", "'t"}));
  EXPECT_EQ(Matches("[一-龥぀-ゟ゠-ヿ]+", "中文abcひらがなカタカナ한"),
            (Strings{"中文", "ひらがなカタカナ"}));
  EXPECT_EQ(Matches("[]a]+", "x]a]y"), (Strings{"]a]"}));  // leading ] is literal
  EXPECT_EQ(Matches("[a\\-z]+", "b-az"), (Strings{"-az"}));
  EXPECT_EQ(Matches("\\x{1F600}|\\u00e9", "é😀"), (Strings{"é", "😀"}));
}

TEST(SplitRegexTest, EmptyMatchesFollowOnigurumaIteration) {
  // find_iter yields empty matches, but never one glued to the previous match's end (the
  // onig crate's rule; Python's `regex` differs here and would add a final "").
  EXPECT_EQ(Matches("x*", "ab"), (Strings{"", "", ""}));
  EXPECT_EQ(Matches("a*", "baa"), (Strings{"", "aa"}));
}

TEST(SplitRegexTest, DeepSeekMainPattern) {
  const char* p = testing::kDeepSeekMain;
  EXPECT_EQ(Matches(p, "Hello world"), (Strings{"Hello", " world"}));
  EXPECT_EQ(Matches(p, "a  \n\n  b"), (Strings{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(Matches(p, "#include <stdio.h>"), (Strings{"#include", " <", "stdio", ".h", ">"}));
  EXPECT_EQ(Matches(p, "don't"), (Strings{"don", "'t"}));
  EXPECT_EQ(Matches(p, "x\t\ty"), (Strings{"x", "\t", "\ty"}));
  EXPECT_EQ(Matches(p, "hello,world!\n"), (Strings{"hello", ",world", "!\n"}));
  EXPECT_EQ(Matches(p, "   a"), (Strings{"  ", " a"}));
  EXPECT_EQ(Matches(p, "a   "), (Strings{"a", "   "}));
}

TEST(SplitRegexTest, Llama3StylePattern) {
  // Another common tokenizer.json Split pattern (case-insensitive contractions, digit triples);
  // expectations checked with Python's `regex` module.
  const char* p =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  EXPECT_EQ(
      Matches(p, "I'LL go  now\n\n  ok 12345!!\n"),
      (Strings{"I", "'LL", " go", " ", " now", "\n\n", " ", " ok", " ", "123", "45", "!!\n"}));
  EXPECT_EQ(Matches(p, "  tabs\t\tand\u3000ideographic"),
            (Strings{" ", " tabs", "\t", "\tand", "\u3000ideographic"}));
}

TEST(SplitRegexTest, UnsupportedConstructsAreErrorsNamingThePattern) {
  for (const char* pattern : {"(a)\\1", "a++", "(?>a)", "(?<=a)b", "(?<!a)b", "[[:alpha:]]",
                              "[a-z&&[^x]]", "a\\Z", "(?:a|b)(?!c)", "(a(?!b))", "\\Ka", "(?x) a",
                              "\\s+(?!\\S\\S)", "\\bword\\b", "a\\B", "\\p{NoSuchClass}+(?!x)"}) {
    auto regex = SplitRegex::Compile(pattern);
    ASSERT_FALSE(regex.ok()) << pattern;
    EXPECT_NE(std::string(regex.status().message()).find(pattern), std::string::npos)
        << regex.status();
  }
}

TEST(SplitRegexTest, MalformedPatternsAreErrors) {
  for (const char* pattern : {"(a", "a)", "[abc", "\\", "[z-a]", "a{3,1}", "\\p{NoSuchClass}"}) {
    EXPECT_FALSE(SplitRegex::Compile(pattern).ok()) << pattern;
  }
}

TEST(SplitRegexTest, RandomPatternsNeverCrashAndMatchesAreOrdered) {
  // Whatever the pattern, Compile either fails cleanly or yields ordered, in-bounds,
  // non-overlapping matches that start and end on character boundaries.
  const std::string alphabet = "ab ()[]{}|*+?^$\\.-,:=!<>013sSdDwWpPN{}xé中";
  const std::vector<std::string> texts = {"", "ab ba", "a  b\n\n", "013 xé中 aab", "   ", "{a}[b]"};
  std::mt19937 rng(99);
  int compiled = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string pattern;
    const int n = static_cast<int>(rng() % 10);
    for (int j = 0; j < n; ++j) {
      const size_t k = rng() % alphabet.size();
      if ((static_cast<uint8_t>(alphabet[k]) & 0xC0) == 0x80) continue;  // keep UTF-8 whole
      pattern += alphabet.substr(k, (static_cast<uint8_t>(alphabet[k]) < 0x80)   ? 1
                                    : (static_cast<uint8_t>(alphabet[k]) < 0xE0) ? 2
                                                                                 : 3);
    }
    auto regex = SplitRegex::Compile(pattern);
    if (!regex.ok()) continue;
    ++compiled;
    for (const std::string& text : texts) {
      size_t previous_end = 0;
      bool first = true;
      for (const auto& [begin, end] : (*regex)->FindAll(text)) {
        ASSERT_LE(begin, end) << pattern;
        ASSERT_LE(end, text.size()) << pattern;
        ASSERT_TRUE(first || begin >= previous_end) << pattern;
        ASSERT_TRUE(begin == text.size() || (static_cast<uint8_t>(text[begin]) & 0xC0) != 0x80);
        previous_end = end;
        first = false;
      }
    }
  }
  EXPECT_GT(compiled, 500);
}

}  // namespace
}  // namespace pdspark::tokenizer
