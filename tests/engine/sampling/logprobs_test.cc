#include "engine/sampling/logprobs.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

TEST(LogprobsTest, LogSoftmaxOfTheChosenTokenAndTheTopOnes) {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  const TokenLogprob lp = ComputeTokenLogprob(logits, 2, 3);
  EXPECT_EQ(lp.token, 2);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(sum), 1e-6);
  EXPECT_EQ(lp.rank, 3);  // two tokens are more likely
  ASSERT_EQ(lp.top.size(), 3u);
  // Most likely first, the lower id first on a tie.
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_EQ(lp.top[2].token, 2);
  EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.top[1].logprob);
  EXPECT_FLOAT_EQ(lp.top[2].logprob, lp.logprob);
}

TEST(LogprobsTest, ProbabilitiesSumToOneWithLargeLogits) {
  std::vector<float> logits;
  for (int i = 0; i < 1000; ++i) logits.push_back(80.0f + 0.01f * static_cast<float>(i % 37));
  double total = 0;
  for (int id = 0; id < 1000; ++id) total += std::exp(ComputeTokenLogprob(logits, id, 0).logprob);
  EXPECT_NEAR(total, 1.0, 1e-5);
}

TEST(LogprobsTest, MaskedTokenIsMinusInfinityAndRankedLast) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits{0.5f, -inf, 0.25f};
  const TokenLogprob lp = ComputeTokenLogprob(logits, 1, 0);
  EXPECT_EQ(lp.logprob, -inf);
  EXPECT_EQ(lp.rank, 3);
  EXPECT_TRUE(lp.top.empty());
}

TEST(LogprobsTest, TopIsCappedByTheVocabulary) {
  const std::vector<float> logits{0.0f, 1.0f};
  EXPECT_EQ(ComputeTokenLogprob(logits, 0, 20).top.size(), 2u);
}

}  // namespace
}  // namespace pdspark::sampling
