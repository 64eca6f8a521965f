// Checks the loader against the tiny model's trained tokenizer (models/tiny-dsv4-dspark, written
// by tools/train/bpe_tokenizer.py): golden ids from that script's independent Python encoder,
// round trips and the special tokens the serving stack relies on. Skips when the model file
// is absent or was retrained since the golden ids were made.
#include <fstream>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::tokenizer {
namespace {

using nlohmann::json;

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";
const std::string kGolden =
    std::string(PDSPARK_SOURCE_DIR) + "/tests/data/tokenizer/tiny_dsv4_golden.jsonl";

class TrainedTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream model_file(kModelDir + "/tokenizer.json");
    if (!model_file) GTEST_SKIP() << "no " << kModelDir << "/tokenizer.json";
    const json document = json::parse(model_file);
    std::ifstream golden(kGolden);
    ASSERT_TRUE(golden);
    std::string line;
    std::getline(golden, line);
    const json header = json::parse(line);
    const json& merges = document.at("model").at("merges");
    const json& last = merges.back();
    const std::string last_merge =
        last.is_string() ? last.get<std::string>()
                         : last[0].get<std::string>() + " " + last[1].get<std::string>();
    if (header.at("merges") != merges.size() ||
        header.at("vocab") != document.at("model").at("vocab").size() ||
        header.at("last_merge") != last_merge) {
      GTEST_SKIP() << "tokenizer.json was retrained; regenerate " << kGolden;
    }
    while (std::getline(golden, line)) rows_.push_back(json::parse(line));
    auto tokenizer = Tokenizer::FromFile(kModelDir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(tokenizer).value();
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<json> rows_;
};

TEST_F(TrainedTokenizerTest, SpecialTokens) {
  EXPECT_EQ(tokenizer_->bos_id(), 0);
  EXPECT_EQ(tokenizer_->eos_id(), 1);
  EXPECT_TRUE(tokenizer_->SpecialTokenId("<｜dspark▁noise｜>").ok());
  EXPECT_TRUE(tokenizer_->IsSpecial(*tokenizer_->SpecialTokenId("<｜dspark▁noise｜>")));
  EXPECT_EQ(tokenizer_->vocab_size(), 4096);
}

TEST_F(TrainedTokenizerTest, MatchesThePythonEncoderAndRoundTrips) {
  ASSERT_GE(rows_.size(), 50u);
  for (const json& row : rows_) {
    const std::string text = row.at("text").get<std::string>();
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, row.at("ids").get<std::vector<int32_t>>()) << "text: " << row.at("text");
    EXPECT_EQ(tokenizer_->Decode(*ids), text);
    IncrementalDetokenizer detok(tokenizer_.get());
    std::string streamed;
    for (int32_t id : *ids) streamed += detok.Feed(id);
    EXPECT_EQ(streamed + detok.Flush(), text);
  }
}

}  // namespace
}  // namespace pdspark::tokenizer
