#include "common/tokenizer/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace pdspark::tokenizer {
namespace {

TEST(Utf8Test, DecodesWellFormedCharacters) {
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  Utf8Step s = DecodeUtf8(text, 0);
  EXPECT_TRUE(s.valid);
  EXPECT_EQ(s.code_point, U'a');
  s = DecodeUtf8(text, 1);
  EXPECT_EQ(s.code_point, U'\u00E9');
  EXPECT_EQ(s.length, 2);
  s = DecodeUtf8(text, 3);
  EXPECT_EQ(s.code_point, U'\u4E2D');
  EXPECT_EQ(s.length, 3);
  s = DecodeUtf8(text, 6);
  EXPECT_EQ(s.code_point, U'\U0001F600');
  EXPECT_EQ(s.length, 4);
  EXPECT_FALSE(FindInvalidUtf8(text).has_value());
}

TEST(Utf8Test, RejectsOverlongsSurrogatesAndOutOfRange) {
  for (const std::string bad :
       {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80",
        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\x80"}) {
    EXPECT_FALSE(DecodeUtf8(bad, 0).valid) << ::testing::PrintToString(bad);
    EXPECT_EQ(FindInvalidUtf8(bad), 0u);
  }
  EXPECT_EQ(FindInvalidUtf8("ok\xE4\xB8"), 2u);  // truncated at the end
  EXPECT_EQ(FindInvalidUtf8("abc\xE4"
                            "def"),
            3u);
}

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  // Unicode's recommended practice (and Rust's from_utf8_lossy): one U+FFFD per maximal
  // ill-formed subpart.
  EXPECT_EQ(LossyUtf8("a\xF0\x9F\x98"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(LossyUtf8("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(LossyUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(LossyUtf8("\xE4\xB8"), "\xEF\xBF\xBD");
  EXPECT_EQ(LossyUtf8("\xE4\xB8\xAD"), "\xE4\xB8\xAD");
  EXPECT_EQ(LossyUtf8(""), "");
}

TEST(Utf8Test, StablePrefixHoldsBackOnlyAnIncompleteTail) {
  EXPECT_EQ(StableUtf8Prefix("abc"), 3u);
  EXPECT_EQ(StableUtf8Prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(StableUtf8Prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(StableUtf8Prefix("ab\xF0\x41"), 4u);  // already invalid: nothing to wait for
  EXPECT_EQ(StableUtf8Prefix("\xE4"), 0u);
  EXPECT_EQ(StableUtf8Prefix("\x80"), 1u);
}

TEST(Utf8Test, AppendUtf8RoundTrips) {
  for (char32_t cp :
       {U'\0', U'\x7F', U'\x80', U'\u07FF', U'\u0800', U'\uFFFF', U'\U00010000', U'\U0010FFFF'}) {
    std::string s;
    AppendUtf8(cp, &s);
    const Utf8Step step = DecodeUtf8(s, 0);
    ASSERT_TRUE(step.valid);
    EXPECT_EQ(step.code_point, cp);
    EXPECT_EQ(step.length, static_cast<int>(s.size()));
  }
}

}  // namespace
}  // namespace pdspark::tokenizer
