#include "engine/sampling/logits_processor.h"

#include <cmath>
#include <limits>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Logs(const std::vector<float>& probs) {
  std::vector<float> logits;
  for (float p : probs) logits.push_back(p > 0 ? std::log(p) : -kInf);
  return logits;
}

TEST(ArgmaxTest, LowestIdWinsTies) {
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{5, 5, 5}), 0);
  EXPECT_EQ(Argmax(std::vector<float>{-kInf, -kInf, -1}), 2);
  EXPECT_EQ(Argmax(std::vector<float>{}), -1);
}

TEST(ArgmaxTest, SkipsNaN) {
  EXPECT_EQ(Argmax(std::vector<float>{std::nanf(""), 1, 2}), 2);
  EXPECT_EQ(Argmax(std::vector<float>{1, std::nanf(""), 0}), 0);
}

TEST(SoftmaxTest, MatchesHandComputedValuesWithTemperature) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  std::vector<float> probs(2);
  SoftmaxWithTemperature(logits, 1.0f, probs);
  EXPECT_THAT(probs, Pointwise(FloatNear(1e-6), std::vector<float>{0.25f, 0.75f}));
  // T = 0.5 squares the odds: 1 : 9.
  SoftmaxWithTemperature(logits, 0.5f, probs);
  EXPECT_THAT(probs, Pointwise(FloatNear(1e-6), std::vector<float>{0.1f, 0.9f}));
}

TEST(SoftmaxTest, MinusInfinityGetsZeroAndAllMaskedIsOneHot) {
  std::vector<float> probs(3);
  SoftmaxWithTemperature(std::vector<float>{-kInf, 0.0f, 0.0f}, 1.0f, probs);
  EXPECT_THAT(probs, ElementsAre(0.0f, 0.5f, 0.5f));
  SoftmaxWithTemperature(std::vector<float>{-kInf, -kInf, -kInf}, 1.0f, probs);
  EXPECT_THAT(probs, ElementsAre(1.0f, 0.0f, 0.0f));
}

TEST(SoftmaxTest, LargeLogitsDoNotOverflow) {
  std::vector<float> probs(2);
  SoftmaxWithTemperature(std::vector<float>{1000.0f, 1000.0f}, 0.01f, probs);
  EXPECT_THAT(probs, ElementsAre(0.5f, 0.5f));
}

TEST(TopKTest, KeepsKLargestAndTiesAtThreshold) {
  std::vector<float> probs = {0.1f, 0.4f, 0.2f, 0.3f};
  ApplyTopK(probs, 2);
  EXPECT_THAT(probs, ElementsAre(0.0f, 0.4f, 0.0f, 0.3f));

  std::vector<float> tied = {0.3f, 0.2f, 0.3f, 0.2f};
  ApplyTopK(tied, 3);  // The 3rd largest is 0.2, shared by ids 1 and 3: both stay.
  EXPECT_THAT(tied, ElementsAre(0.3f, 0.2f, 0.3f, 0.2f));
  ApplyTopK(tied, 1);
  EXPECT_THAT(tied, ElementsAre(0.3f, 0.0f, 0.3f, 0.0f));
}

TEST(TopKTest, DisabledOrLargeKIsNoOp) {
  const std::vector<float> original = {0.1f, 0.4f, 0.2f, 0.3f};
  for (int32_t k : {-1, 0, 4, 10}) {
    std::vector<float> probs = original;
    ApplyTopK(probs, k);
    EXPECT_EQ(probs, original) << k;
  }
}

TEST(TopPTest, KeepsSmallestPrefixReachingP) {
  // Sorted: 0.4 (id 1), 0.3 (id 3), 0.2 (id 2), 0.1 (id 0).
  const std::vector<float> original = {0.1f, 0.4f, 0.2f, 0.3f};
  struct Case {
    float top_p;
    std::vector<float> expected;
  };
  const std::vector<Case> cases = {
      {0.3f, {0.0f, 0.4f, 0.0f, 0.0f}},   // 0.4 alone already covers 0.3.
      {0.39f, {0.0f, 0.4f, 0.0f, 0.0f}},  // Just below the first token's mass.
      {0.5f, {0.0f, 0.4f, 0.0f, 0.3f}},   // Needs the second.
      {0.75f, {0.0f, 0.4f, 0.2f, 0.3f}},  // 0.7 < 0.75: the third joins.
      {0.95f, {0.1f, 0.4f, 0.2f, 0.3f}},
  };
  for (const Case& c : cases) {
    std::vector<float> probs = original;
    ApplyTopP(probs, c.top_p);
    EXPECT_EQ(probs, c.expected) << c.top_p;
  }
}

TEST(TopPTest, UsesMassOfUnnormalisedWeights) {
  // Same shape as above scaled by 2 (e.g. after top-k): the rule is relative to the total.
  std::vector<float> probs = {0.2f, 0.8f, 0.4f, 0.6f};
  ApplyTopP(probs, 0.5f);
  EXPECT_THAT(probs, ElementsAre(0.0f, 0.8f, 0.0f, 0.6f));
}

TEST(TopPTest, TiesBreakTowardsLowerId) {
  std::vector<float> probs = {0.25f, 0.25f, 0.25f, 0.25f};
  ApplyTopP(probs, 0.5f);
  EXPECT_THAT(probs, ElementsAre(0.25f, 0.25f, 0.0f, 0.0f));
}

// Reference top-p: sort everything, keep token i iff the mass ranked above it < top_p * total.
std::vector<float> BruteForceTopP(const std::vector<float>& probs, float top_p) {
  std::vector<int32_t> order(probs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  });
  double total = 0.0;
  for (float p : probs) total += p;
  std::vector<float> expected(probs.size(), 0.0f);
  double before = 0.0;
  for (int32_t id : order) {
    if (before >= top_p * total) break;
    expected[id] = probs[id];
    before += probs[id];
  }
  return expected;
}

TEST(TopPTest, LargeVocabMatchesBruteForce) {
  // Peaked and flat shapes put the nucleus boundary in sparse and in crowded buckets.
  std::mt19937_64 rng(7);
  for (int64_t vocab : {5000, 129280}) {
    for (float concentration : {0.05f, 5.0f}) {
      std::gamma_distribution<float> gamma(concentration, 1.0f);
      std::vector<float> probs(vocab);
      for (float& p : probs) p = gamma(rng) + 1e-30f;
      for (float top_p : {0.1f, 0.5f, 0.9f, 0.999f}) {
        std::vector<float> fast = probs;
        ApplyTopP(fast, top_p);
        EXPECT_EQ(fast, BruteForceTopP(probs, top_p))
            << vocab << " " << concentration << " " << top_p;
      }
    }
  }
}

TEST(TopPTest, ManyExactTiesKeepLowestIds) {
  std::vector<float> probs(10000, 1.0f);
  probs[1234] = 0.0f;
  ApplyTopP(probs, 0.25f);
  // Exactly the 2500 lowest ids (skipping the zero) survive.
  int kept = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0f) {
      ++kept;
      EXPECT_LE(i, 2500u) << i;
    }
  }
  EXPECT_EQ(kept, 2500);
}

TEST(MinPTest, KeepsTokensAboveFractionOfMax) {
  std::vector<float> probs = {0.05f, 0.5f, 0.2f, 0.25f};
  ApplyMinP(probs, 0.4f);  // Threshold 0.2: 0.2 stays (>=), 0.05 goes.
  EXPECT_THAT(probs, ElementsAre(0.0f, 0.5f, 0.2f, 0.25f));
  ApplyMinP(probs, 1.0f);
  EXPECT_THAT(probs, ElementsAre(0.0f, 0.5f, 0.0f, 0.0f));
}

TEST(ProcessLogitsTest, GreedyIsOneHotOnLowestArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_THAT(ProcessLogits(std::vector<float>{1, 7, 7, -2}, params), ElementsAre(0, 1, 0, 0));
}

TEST(ProcessLogitsTest, NoMasksIsPlainSoftmax) {
  const SamplingParams params;
  EXPECT_THAT(ProcessLogits(Logs({0.1f, 0.2f, 0.3f, 0.4f}), params),
              Pointwise(FloatNear(1e-6), std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}));
}

TEST(ProcessLogitsTest, AppliesTopKThenTopPThenMinPAndRenormalises) {
  // p = 0.05, 0.1, 0.15, 0.3, 0.4.
  const std::vector<float> logits = Logs({0.05f, 0.1f, 0.15f, 0.3f, 0.4f});
  SamplingParams params;
  params.top_k = 3;  // -> 0.15, 0.3, 0.4 (renormalised: 0.1765, 0.3529, 0.4706).
  EXPECT_THAT(ProcessLogits(logits, params),
              Pointwise(FloatNear(1e-5),
                        std::vector<float>{0, 0, 0.15f / 0.85f, 0.3f / 0.85f, 0.4f / 0.85f}));
  // top_p = 0.8 of the top-k mass: 0.4706 + 0.3529 = 0.8235 >= 0.8, so id 2 goes. If top-p
  // were applied before top-k on the full mass, 0.4 + 0.3 = 0.7 < 0.8 would keep id 2.
  params.top_p = 0.8f;
  EXPECT_THAT(ProcessLogits(logits, params),
              Pointwise(FloatNear(1e-6), std::vector<float>{0, 0, 0, 0.3f / 0.7f, 0.4f / 0.7f}));
  // min_p 0.8 of max 0.4 = 0.32: only id 4 survives.
  params.min_p = 0.8f;
  EXPECT_THAT(ProcessLogits(logits, params), ElementsAre(0, 0, 0, 0, 1));
}

TEST(ProcessLogitsTest, TemperatureIsAppliedBeforeMasks) {
  // At T = 0.5 the odds 1:2:3 become 1:4:9, so top_p 0.6 keeps only id 2 (9/14 = 0.64); at
  // T = 1 it would also need id 1 (3/6 = 0.5 < 0.6).
  SamplingParams params;
  params.temperature = 0.5f;
  params.top_p = 0.6f;
  EXPECT_THAT(ProcessLogits(Logs({1.0f / 6, 2.0f / 6, 3.0f / 6}), params), ElementsAre(0, 0, 1));
  params.temperature = 1.0f;
  EXPECT_THAT(ProcessLogits(Logs({1.0f / 6, 2.0f / 6, 3.0f / 6}), params),
              Pointwise(FloatNear(1e-6), std::vector<float>{0, 0.4f, 0.6f}));
}

TEST(ProcessLogitsRowsTest, ProcessesEachRowIndependently) {
  SamplingParams params;
  params.top_k = 1;
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, /*row 2*/ 5.0f, 2.0f, 1.0f};
  std::vector<float> probs(logits.size());
  ProcessLogitsRows(logits, 3, params, probs);
  EXPECT_THAT(probs, ElementsAre(0, 1, 0, 1, 0, 0));
}

TEST(NormalizeTest, SumsToOneAndLeavesZeroAlone) {
  std::vector<float> probs = {1.0f, 3.0f};
  Normalize(probs);
  EXPECT_THAT(probs, ElementsAre(0.25f, 0.75f));
  std::vector<float> zeros = {0.0f, 0.0f};
  Normalize(zeros);
  EXPECT_THAT(zeros, ElementsAre(0.0f, 0.0f));
}

}  // namespace
}  // namespace pdspark::sampling
