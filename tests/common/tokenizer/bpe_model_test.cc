#include "common/tokenizer/bpe_model.h"

#include <string>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "gtest/gtest.h"
#include "test_tokenizer_json.h"

namespace pdspark::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t B(char c) { return testing::kByteBase + static_cast<uint8_t>(c); }

std::unique_ptr<BpeModel> Model(const std::vector<std::pair<std::string, std::string>>& merges,
                                bool as_pairs = false) {
  auto model = BpeModel::FromJson(testing::MakeTokenizerJson(merges, as_pairs).at("model"));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(model).value() : nullptr;
}

Ids Encode(const BpeModel& model, const std::string& raw_word) {
  Ids ids;
  EXPECT_TRUE(model.EncodeWord(BytesToSymbols(raw_word), &ids).ok());
  return ids;
}

TEST(BpeModelTest, LowerRankMergesFirst) {
  const int32_t el = testing::kFirstMergeId;
  auto el_first = Model({{"e", "l"}, {"l", "l"}});
  EXPECT_EQ(Encode(*el_first, "hello"), (Ids{B('h'), el, B('l'), B('o')}));
  auto ll_first = Model({{"l", "l"}, {"e", "l"}});
  const int32_t ll = testing::kFirstMergeId;
  EXPECT_EQ(Encode(*ll_first, "hello"), (Ids{B('h'), B('e'), ll, B('o')}));
}

TEST(BpeModelTest, ChainsMergesIntoOneToken) {
  auto model = Model({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}});
  EXPECT_EQ(Encode(*model, "hello"), (Ids{testing::kFirstMergeId + 3}));
  EXPECT_EQ(Encode(*model, "hellohe"), (Ids{testing::kFirstMergeId + 3, testing::kFirstMergeId}));
}

TEST(BpeModelTest, EqualRanksMergeLeftmostFirst) {
  auto model = Model({{"a", "a"}});
  const int32_t aa = testing::kFirstMergeId;
  EXPECT_EQ(Encode(*model, "aaa"), (Ids{aa, B('a')}));
  EXPECT_EQ(Encode(*model, "aaaa"), (Ids{aa, aa}));
}

TEST(BpeModelTest, PairAndStringMergeFormatsAgree) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"}};
  auto strings = Model(merges, false);
  auto pairs = Model(merges, true);
  EXPECT_EQ(Encode(*strings, " world"), Encode(*pairs, " world"));
  EXPECT_EQ(Encode(*strings, " world"), (Ids{testing::kFirstMergeId + 4}));
}

TEST(BpeModelTest, CachedResultsAreStable) {
  auto model = Model({{"a", "b"}});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Encode(*model, "abab"), (Ids{266, 266}));
  const std::string long_word(1000, 'a');  // beyond the cache limit, still correct
  EXPECT_EQ(Encode(*model, long_word).size(), 1000u);
}

TEST(BpeModelTest, BadMergesAreErrors) {
  nlohmann::json config = testing::MakeTokenizerJson({}).at("model");
  config["merges"] = {"a b c"};
  EXPECT_FALSE(BpeModel::FromJson(config).ok());
  config["merges"] = {"a b"};  // "ab" is not in the vocab
  EXPECT_FALSE(BpeModel::FromJson(config).ok());
  config["merges"] = nlohmann::json::array({nlohmann::json::array({"a"})});
  EXPECT_FALSE(BpeModel::FromJson(config).ok());
  config = testing::MakeTokenizerJson({}).at("model");
  config["type"] = "WordPiece";
  EXPECT_FALSE(BpeModel::FromJson(config).ok());
  config = testing::MakeTokenizerJson({}).at("model");
  config["continuing_subword_prefix"] = "##";
  EXPECT_FALSE(BpeModel::FromJson(config).ok());
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWordsFromTheVocab) {
  nlohmann::json config = testing::MakeTokenizerJson({{"a", "b"}, {"ab", "c"}}).at("model");
  config["merges"] = {"a b"};  // "abc" stays in the vocab but has no merge path
  config["ignore_merges"] = true;
  auto model = BpeModel::FromJson(config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Encode(**model, "abc"), (Ids{267}));
  EXPECT_EQ(Encode(**model, "abd"), (Ids{266, B('d')}));
}

}  // namespace
}  // namespace pdspark::tokenizer
