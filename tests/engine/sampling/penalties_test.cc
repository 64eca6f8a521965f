#include "engine/sampling/penalties.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(PenaltiesTest, NothingAskedLeavesTheRowAlone) {
  SamplingParams params;
  EXPECT_FALSE(HasLogitAdjustments(params));
  std::vector<float> logits{1, -2, 3};
  ApplyLogitAdjustments(params, std::vector<int32_t>{0, 1}, std::vector<int32_t>{2, 2}, logits);
  EXPECT_EQ(logits, (std::vector<float>{1, -2, 3}));
}

TEST(PenaltiesTest, RepetitionPenaltyCountsPromptAndOutput) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  std::vector<float> logits{4, -4, 4, -4, 1};
  // Token 0 in the prompt, 1 in the output, 4 in both; 2 and 3 nowhere.
  ApplyLogitAdjustments(params, std::vector<int32_t>{0, 4}, std::vector<int32_t>{1, 4, 4}, logits);
  EXPECT_EQ(logits, (std::vector<float>{2, -8, 4, -4, 0.5f}));
}

TEST(PenaltiesTest, FrequencyAndPresenceCountTheOutputOnly) {
  SamplingParams params;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 1.0f;
  std::vector<float> logits{0, 0, 0};
  ApplyLogitAdjustments(params, std::vector<int32_t>{2, 2}, std::vector<int32_t>{0, 0, 0, 1},
                        logits);
  EXPECT_EQ(logits, (std::vector<float>{-2.5f, -1.5f, 0}));
}

TEST(PenaltiesTest, LogitBiasAddsAndIgnoresIdsPastTheRow) {
  SamplingParams params;
  params.logit_bias = {{1, 100.0f}, {2, -5.0f}, {9, 1.0f}};
  std::vector<float> logits{0, 0, 0};
  ApplyLogitAdjustments(params, {}, {}, logits);
  EXPECT_EQ(logits, (std::vector<float>{0, 100, -5}));
}

TEST(PenaltiesTest, BadWordsBanTheirLastTokenAfterTheRest) {
  SamplingParams params;
  params.bad_words = {{3}, {1, 2}, {0, 1, 4}};
  std::vector<float> after_one{0, 0, 0, 0, 0};
  ApplyLogitAdjustments(params, {}, std::vector<int32_t>{5, 1}, after_one);
  EXPECT_EQ(after_one, (std::vector<float>{0, 0, -kInf, -kInf, 0}));
  std::vector<float> after_zero_one{0, 0, 0, 0, 0};
  ApplyLogitAdjustments(params, {}, std::vector<int32_t>{0, 1}, after_zero_one);
  EXPECT_EQ(after_zero_one, (std::vector<float>{0, 0, -kInf, -kInf, -kInf}));
  // A prefix longer than the output cannot match.
  std::vector<float> at_start{0, 0, 0, 0, 0};
  ApplyLogitAdjustments(params, {}, std::vector<int32_t>{1}, at_start);
  EXPECT_EQ(at_start, (std::vector<float>{0, 0, -kInf, -kInf, 0}));
}

TEST(PenaltiesTest, ValidateRefusesOutOfRangeValues) {
  SamplingParams params;
  params.presence_penalty = 2.5f;
  EXPECT_FALSE(params.Validate().ok());
  params = {};
  params.repetition_penalty = 0.0f;
  EXPECT_FALSE(params.Validate().ok());
  params = {};
  params.logit_bias = {{1, 101.0f}};
  EXPECT_FALSE(params.Validate().ok());
  params = {};
  params.bad_words = {{}};
  EXPECT_FALSE(params.Validate().ok());
  params = {};
  params.logit_bias = {{7, 1.0f}};
  EXPECT_TRUE(params.Validate().ok());
  EXPECT_FALSE(params.CheckTokenIds(7).ok());
  EXPECT_TRUE(params.CheckTokenIds(8).ok());
}

}  // namespace
}  // namespace pdspark::sampling
