// The token mask of structured output: exactly the tokens whose bytes continue the grammar stay,
// the end tokens only where the document is whole, and special (empty) tokens never.
#include "engine/sampling/token_vocabulary.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

// 0 "{", 1 "{\"", 2 "a", 3 "}", 4 "\":1}", 5 " ", 6 "" (special), 7 "\"" ; EOS = 6.
TokenVocabulary Vocabulary() {
  return TokenVocabulary({"{", "{\"", "a", "}", "\":1}", " ", "", "\""});
}

std::vector<int> Allowed(const TokenVocabulary& vocab, const structured::GrammarMatcher& m) {
  std::vector<float> logits(8, 0.0f);
  const std::vector<int32_t> end = {6};
  vocab.Mask(m, end, logits);
  std::vector<int> allowed;
  for (int i = 0; i < 8; ++i) {
    if (std::isfinite(logits[i])) allowed.push_back(i);
  }
  return allowed;
}

TEST(TokenVocabulary, MasksWhatCannotContinueAndEndsOnlyWhereWhole) {
  const TokenVocabulary vocab = Vocabulary();
  structured::GrammarMatcher m(structured::Grammar::AnyJsonObject());
  EXPECT_EQ(Allowed(vocab, m), (std::vector<int>{0, 1, 5}));  // "{", "{\"", one space
  ASSERT_TRUE(vocab.Accept(m, 1));                            // {"
  // Any bytes of a key, its end, even a whole empty key with its value: all but the end token.
  EXPECT_EQ(Allowed(vocab, m), (std::vector<int>{0, 1, 2, 3, 4, 5, 7}));
  ASSERT_TRUE(vocab.Accept(m, 2));                      // {"a
  ASSERT_TRUE(vocab.Accept(m, 4));                      // {"a":1}
  EXPECT_EQ(Allowed(vocab, m), (std::vector<int>{6}));  // only the end
  EXPECT_FALSE(vocab.Accept(m, 6));                     // the end token has no bytes to advance by
}

TEST(TokenVocabulary, ADeadMatcherLeavesOnlyTheEnd) {
  const TokenVocabulary vocab = Vocabulary();
  structured::GrammarMatcher m(structured::Grammar::AnyJsonObject());
  EXPECT_FALSE(vocab.Accept(m, 2));  // "a" cannot start an object
  std::vector<float> logits(8, 0.0f);
  logits[6] = -INFINITY;  // suppressed (min_tokens): stopping is still all that is left
  const std::vector<int32_t> end = {6};
  vocab.Mask(m, end, logits);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(std::isfinite(logits[i]), i == 6) << i;
}

// The mask equals trying every token on its own, with the bundled tokenizer's vocabulary, in
// each kind of place a JSON completion goes through (the free-string shortcut included).
TEST(TokenVocabulary, MaskEqualsTryingEveryToken) {
  const auto vocab = TokenVocabulary::FromModelDir(
                         std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark", 4096)
                         .value();
  const auto grammar = structured::Grammar::FromJsonSchema(
                           R"({"type": "object", "properties": {"s": {"type": "string"},
                               "short": {"type": "string", "maxLength": 2}, "n": {"type":
                               "number"}, "any": {}}})")
                           .value();
  const std::vector<int32_t> end = {1};
  for (const std::string prefix :
       {"", R"({"s)", R"({"s": "ab)", "{\"s\": \"\xc3", R"({"s": "a\)", R"({"short": "a)",
        R"({"n": -1.)", R"({"any": [tr)", R"({"any": {"k": "v"}})"}) {
    structured::GrammarMatcher m(grammar);
    ASSERT_TRUE(m.Advance(prefix)) << prefix;
    std::vector<float> logits(vocab->size(), 0.0f);
    vocab->Mask(m, end, logits);
    int allowed = 0;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (id == end[0]) continue;
      structured::GrammarMatcher one = m;
      EXPECT_EQ(std::isfinite(logits[id]), vocab->Accept(one, id)) << prefix << " token " << id;
      allowed += std::isfinite(logits[id]);
    }
    EXPECT_EQ(allowed == 0, m.CanEnd()) << prefix;  // a whole document takes only the end
  }
}

}  // namespace
}  // namespace pdspark::sampling
