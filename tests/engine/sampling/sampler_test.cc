#include "engine/sampling/sampler.h"

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "engine/sampling/logits_processor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdspark::sampling {
namespace {

SamplingParams Seeded(uint64_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

TEST(SampleCategoricalTest, InverseCdfAndZeroWeightsNeverChosen) {
  const std::vector<float> weights = {0.0f, 1.0f, 0.0f, 3.0f, 0.0f};
  EXPECT_EQ(SampleCategorical(weights, 0.0), 1);
  EXPECT_EQ(SampleCategorical(weights, 0.2499), 1);
  EXPECT_EQ(SampleCategorical(weights, 0.25), 3);
  EXPECT_EQ(SampleCategorical(weights, std::nextafter(1.0, 0.0)), 3);
  EXPECT_EQ(SampleCategorical(std::vector<float>{0.0f, 0.0f}, 0.5), -1);
}

TEST(SamplerTest, CreateValidatesParams) {
  SamplingParams params;
  params.top_p = 0.0f;
  EXPECT_EQ(Sampler::Create(params).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SamplerTest, GreedyPicksLowestIdOnTies) {
  EXPECT_EQ(Sampler::Greedy(std::vector<float>{0.5f, 2.0f, 2.0f, 1.0f}), 1);
  SamplingParams params;
  params.temperature = 0.0f;
  auto sampler = Sampler::Create(params);
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ(sampler->SampleFromLogits(std::vector<float>{3.0f, 3.0f, 1.0f}, 0), 0);
}

TEST(SamplerTest, UniformIsInUnitInterval) {
  auto sampler = Sampler::Create(Seeded(1));
  ASSERT_TRUE(sampler.ok());
  for (int i = 0; i < 10000; ++i) {
    const double u = sampler->Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(SamplerTest, SameSeedGivesSameTokens) {
  const std::vector<float> logits = {0.1f, 0.5f, -0.3f, 1.2f, 0.0f, 0.7f};
  auto a = Sampler::Create(Seeded(42));
  auto b = Sampler::Create(Seeded(42));
  auto c = Sampler::Create(Seeded(43));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<int32_t> from_a, from_b, from_c;
  for (int i = 0; i < 200; ++i) {
    from_a.push_back(a->SampleFromLogits(logits, i));
    from_b.push_back(b->SampleFromLogits(logits, i));
    from_c.push_back(c->SampleFromLogits(logits, i));
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_NE(from_a, from_c);
  EXPECT_EQ(a->seed(), 42u);
}

TEST(SamplerTest, StreamIsIndependentOfOtherRequestsInTheBatch) {
  // A request's tokens must not change when other requests are batched with it: run request A
  // alone, then interleaved with B doing a varying amount of work per step.
  const std::vector<float> logits = {0.2f, 0.1f, 0.9f, 0.4f};
  auto alone = Sampler::Create(Seeded(7));
  ASSERT_TRUE(alone.ok());
  std::vector<int32_t> expected;
  for (int i = 0; i < 100; ++i) expected.push_back(alone->SampleFromLogits(logits, i));

  auto a = Sampler::Create(Seeded(7));
  auto b = Sampler::Create(Seeded(7));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> batched;
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < i % 3; ++j) b->SampleFromLogits(logits, i);
    batched.push_back(a->SampleFromLogits(logits, i));
  }
  EXPECT_EQ(batched, expected);
}

TEST(SamplerTest, UnseededSamplersGetDifferentSeeds) {
  auto a = Sampler::Create(SamplingParams{});
  auto b = Sampler::Create(SamplingParams{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->seed(), b->seed());
}

TEST(SamplerTest, SampleFrequenciesMatchProbabilities) {
  auto sampler = Sampler::Create(Seeded(123));
  ASSERT_TRUE(sampler.ok());
  const std::vector<float> probs = {0.1f, 0.0f, 0.2f, 0.3f, 0.4f};
  constexpr int kTrials = 200000;
  std::vector<int> counts(probs.size());
  for (int i = 0; i < kTrials; ++i) ++counts[sampler->Sample(probs)];
  EXPECT_EQ(counts[1], 0);
  for (size_t i = 0; i < probs.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(counts[i]) / kTrials, probs[i], 0.005) << i;
  }
}

// Plain temperature sampling draws by the Gumbel-max trick from (seed, position) alone: the
// same token for a position whatever was drawn before, and what a device's perturbed argmax
// gives (GumbelArgmax of GumbelDraw).
TEST(SamplerTest, PlainSamplingIsAFunctionOfSeedAndPosition) {
  const std::vector<float> logits = {0.1f, 0.5f, -0.3f, 1.2f, 0.0f, 0.7f};
  SamplingParams params = Seeded(9);
  params.temperature = 0.7f;
  auto forward = Sampler::Create(params);
  auto backward = Sampler::Create(params);
  ASSERT_TRUE(forward.ok() && backward.ok());
  std::vector<int32_t> a(50), b(50);
  for (int i = 0; i < 50; ++i) a[i] = forward->SampleFromLogits(logits, i);
  for (int i = 49; i >= 0; --i) b[i] = backward->SampleFromLogits(logits, i);
  EXPECT_EQ(a, b);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 2u);  // it does sample
  const kernels::GumbelRow draw = forward->GumbelDraw(17);
  EXPECT_EQ(draw.inv_temperature, 1.0 / static_cast<double>(0.7f));
  EXPECT_EQ(draw.seed, 9u);
  EXPECT_EQ(draw.counter, 17u);
  EXPECT_EQ(Sampler::GumbelArgmax(logits, draw), a[17]);

  params.temperature = 0.0f;
  auto greedy = Sampler::Create(params);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(greedy->GumbelDraw(3).inv_temperature, 0.0);
}

// Sampling with top-k, top-p and min-p is a Gumbel-max draw over the tokens above the cut the
// row's highest logits give (kernels/sampling_cut.h): a function of (seed, position), keeping
// the tokens ProcessLogits keeps, each as often as ProcessLogits' probability says.
TEST(SamplerTest, MaskedDrawsKeepProcessLogitsTokensAtTheirProbabilities) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(40);
  for (float& v : logits) v = normal(rng);
  struct Case {
    int32_t top_k;
    float top_p, min_p, temperature;
  };
  for (const Case c :
       {Case{5, 1.0f, 0.0f, 1.0f}, Case{12, 0.7f, 0.0f, 0.8f}, Case{20, 1.0f, 0.15f, 1.3f},
        Case{40, 0.5f, 0.05f, 1.0f}, Case{1, 1.0f, 0.0f, 2.0f}}) {
    SamplingParams params = Seeded(21);
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    params.temperature = c.temperature;
    auto sampler = Sampler::Create(params);
    ASSERT_TRUE(sampler.ok());
    const std::vector<float> probs = ProcessLogits(logits, params);
    constexpr int kDraws = 40000;
    std::vector<int> counts(logits.size());
    for (int i = 0; i < kDraws; ++i) ++counts[sampler->SampleFromLogits(logits, i)];
    for (size_t t = 0; t < logits.size(); ++t) {
      if (probs[t] == 0.0f) {
        EXPECT_EQ(counts[t], 0) << "token " << t << " top_k " << c.top_k;
      } else {  // 4 standard deviations of a frequency from 40000 draws at most
        EXPECT_NEAR(static_cast<double>(counts[t]) / kDraws, probs[t], 0.01)
            << "token " << t << " top_k " << c.top_k;
      }
    }
    const kernels::GumbelRow draw = sampler->GumbelDraw(7);
    EXPECT_EQ(draw.top_k, std::max(c.top_k, 0));
    EXPECT_EQ(draw.top_p, c.top_p);
    auto again = Sampler::Create(params);
    EXPECT_EQ(again->SampleFromLogits(logits, 7), Sampler::GumbelArgmax(logits, draw));
  }
}

TEST(SamplerTest, SampleFromLogitsHonoursTopK) {
  SamplingParams params = Seeded(5);
  params.top_k = 2;
  auto sampler = Sampler::Create(params);
  ASSERT_TRUE(sampler.ok());
  const std::vector<float> logits = {3.0f, 0.0f, 2.9f, 1.0f};
  for (int i = 0; i < 1000; ++i) {
    const int32_t token = sampler->SampleFromLogits(logits, i);
    ASSERT_TRUE(token == 0 || token == 2) << token;
  }
}

}  // namespace
}  // namespace pdspark::sampling
