#include "engine/sampling/stop_conditions.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

using ::testing::ElementsAre;

constexpr int32_t kEos = 1;
const std::vector<int32_t> kEosIds = {kEos};

SamplingParams Params(int32_t max_tokens, std::vector<int32_t> stop_ids = {},
                      bool ignore_eos = false) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.stop_token_ids = std::move(stop_ids);
  params.ignore_eos = ignore_eos;
  return params;
}

TEST(StopConditionsTest, NothingToStop) {
  std::vector<int32_t> tokens = {5, 6, 7};
  EXPECT_EQ(ApplyStopConditions(Params(100), kEosIds, 0, &tokens), FinishReason::kNone);
  EXPECT_THAT(tokens, ElementsAre(5, 6, 7));
}

TEST(StopConditionsTest, CutsAfterEosAndKeepsIt) {
  std::vector<int32_t> tokens = {5, kEos, 7, kEos};
  EXPECT_EQ(ApplyStopConditions(Params(100), kEosIds, 0, &tokens), FinishReason::kStop);
  EXPECT_THAT(tokens, ElementsAre(5, kEos));
}

TEST(StopConditionsTest, IgnoreEosStillHonoursStopTokenIds) {
  std::vector<int32_t> tokens = {5, kEos, 9, 7};
  EXPECT_EQ(ApplyStopConditions(Params(100, {9}, true), kEosIds, 0, &tokens), FinishReason::kStop);
  EXPECT_THAT(tokens, ElementsAre(5, kEos, 9));
}

TEST(StopConditionsTest, MaxTokensCountsEarlierTokens) {
  std::vector<int32_t> tokens = {5, 6, 7, 8};
  EXPECT_EQ(ApplyStopConditions(Params(10), kEosIds, 8, &tokens), FinishReason::kLength);
  EXPECT_THAT(tokens, ElementsAre(5, 6));

  std::vector<int32_t> exact = {5, 6};
  EXPECT_EQ(ApplyStopConditions(Params(10), kEosIds, 8, &exact), FinishReason::kLength);
  EXPECT_THAT(exact, ElementsAre(5, 6));

  std::vector<int32_t> over = {5};
  EXPECT_EQ(ApplyStopConditions(Params(10), kEosIds, 10, &over), FinishReason::kLength);
  EXPECT_TRUE(over.empty());
}

TEST(StopConditionsTest, StopTokenOnTheLastAllowedSlotIsStop) {
  std::vector<int32_t> tokens = {5, kEos, 7};
  EXPECT_EQ(ApplyStopConditions(Params(2), kEosIds, 0, &tokens), FinishReason::kStop);
  EXPECT_THAT(tokens, ElementsAre(5, kEos));
  // Past the limit a stop token does not count: the length limit cuts first.
  std::vector<int32_t> late = {5, 6, kEos};
  EXPECT_EQ(ApplyStopConditions(Params(2), kEosIds, 0, &late), FinishReason::kLength);
  EXPECT_THAT(late, ElementsAre(5, 6));
}

TEST(StopConditionsTest, AcceptanceResultCountsOnlySurvivingDrafts) {
  // Drafts 5, kEos, 7 accepted plus bonus 8: the accepted EOS ends the round, no bonus.
  AcceptanceResult result{.num_accepted = 3, .tokens = {5, kEos, 7, 8}};
  EXPECT_EQ(ApplyStopConditions(Params(100), kEosIds, 0, &result), FinishReason::kStop);
  EXPECT_EQ(result.num_accepted, 2);
  EXPECT_THAT(result.tokens, ElementsAre(5, kEos));

  // A stop on the correction token keeps every accepted draft.
  AcceptanceResult correction{.num_accepted = 2, .tokens = {5, 6, kEos}};
  EXPECT_EQ(ApplyStopConditions(Params(100), kEosIds, 0, &correction), FinishReason::kStop);
  EXPECT_EQ(correction.num_accepted, 2);
  EXPECT_THAT(correction.tokens, ElementsAre(5, 6, kEos));

  AcceptanceResult length{.num_accepted = 3, .tokens = {5, 6, 7, 8}};
  EXPECT_EQ(ApplyStopConditions(Params(5), kEosIds, 3, &length), FinishReason::kLength);
  EXPECT_EQ(length.num_accepted, 2);
  EXPECT_THAT(length.tokens, ElementsAre(5, 6));
}

TEST(StopConditionsTest, StopTokensInsideMinTokensDoNotStop) {
  SamplingParams params = Params(100, {9});
  params.min_tokens = 3;
  // Two tokens exist already: index 0 is token #3 (still inside min_tokens), index 1 is #4.
  std::vector<int32_t> tokens = {kEos, 9, 7};
  EXPECT_EQ(ApplyStopConditions(params, kEosIds, 2, &tokens), FinishReason::kStop);
  EXPECT_THAT(tokens, ElementsAre(kEos, 9));
  std::vector<int32_t> early = {9, kEos, 7};
  EXPECT_EQ(ApplyStopConditions(params, kEosIds, 0, &early), FinishReason::kNone);
  EXPECT_THAT(early, ElementsAre(9, kEos, 7));
}

TEST(SuppressStopTokensTest, MasksEosAndStopIdsUntilMinTokens) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  SamplingParams params = Params(100, {3});
  params.min_tokens = 2;
  std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f};
  SuppressStopTokens(params, kEosIds, 1, logits);
  EXPECT_THAT(logits, ElementsAre(0.5f, -kInf, 0.5f, -kInf));

  std::vector<float> reached = {0.5f, 0.5f, 0.5f, 0.5f};
  SuppressStopTokens(params, kEosIds, 2, reached);
  EXPECT_THAT(reached, ElementsAre(0.5f, 0.5f, 0.5f, 0.5f));

  params.ignore_eos = true;
  params.stop_token_ids = {3, 42};  // Out-of-vocab ids are ignored.
  std::vector<float> ignore_eos = {0.5f, 0.5f, 0.5f, 0.5f};
  SuppressStopTokens(params, kEosIds, 0, ignore_eos);
  EXPECT_THAT(ignore_eos, ElementsAre(0.5f, 0.5f, 0.5f, -kInf));
}

TEST(StopConditionsTest, MultipleEosIds) {
  const std::vector<int32_t> eos_ids = {1, 2};
  std::vector<int32_t> tokens = {5, 2, 1};
  EXPECT_EQ(ApplyStopConditions(Params(100), eos_ids, 0, &tokens), FinishReason::kStop);
  EXPECT_THAT(tokens, ElementsAre(5, 2));
}

}  // namespace
}  // namespace pdspark::sampling
