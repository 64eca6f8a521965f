#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

TEST(HcSplitSinkhorn, ZeroMixesGiveUniformCoefficients) {
  const int hc = 4;
  std::vector<float> mixes(24, 0.0f), base(24, 0.0f), scale = {1, 1, 1};
  std::vector<float> pre(hc), post(hc), comb(hc * hc);
  HcSplitSinkhorn(mixes.data(), scale.data(), base.data(), hc, 20, 1e-6f, pre.data(), post.data(),
                  comb.data());
  for (int j = 0; j < hc; ++j) {
    EXPECT_FLOAT_EQ(pre[j], 0.5f + 1e-6f);  // sigmoid(0) + eps
    EXPECT_FLOAT_EQ(post[j], 1.0f);         // 2 * sigmoid(0)
  }
  // Row softmax 0.25 + eps; every normalisation then divides by (1 + 4 eps) + eps.
  for (float c : comb) EXPECT_NEAR(c, 0.25f, 1e-5f);
}

TEST(HcSplitSinkhorn, HandComputedTwoStreams) {
  // hc = 2: mixes [pre0, pre1, post0, post1, c00, c01, c10, c11]; one iteration only.
  const int hc = 2;
  std::vector<float> mixes = {0, 0, 0, 0, std::log(3.0f), 0, 0, 0};
  std::vector<float> base(8, 0.0f), scale = {1, 1, 1};
  std::vector<float> pre(hc), post(hc), comb(hc * hc);
  HcSplitSinkhorn(mixes.data(), scale.data(), base.data(), hc, 1, 0.0f, pre.data(), post.data(),
                  comb.data());
  // Row softmax: [[0.75, 0.25], [0.5, 0.5]]; column sums 1.25, 0.75.
  EXPECT_NEAR(comb[0], 0.75f / 1.25f, 1e-6);
  EXPECT_NEAR(comb[1], 0.25f / 0.75f, 1e-6);
  EXPECT_NEAR(comb[2], 0.5f / 1.25f, 1e-6);
  EXPECT_NEAR(comb[3], 0.5f / 0.75f, 1e-6);
}

TEST(HcSplitSinkhorn, TwentyIterationsAreDoublyStochastic) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int hc = 4;
  std::vector<float> mixes(24), base(24), scale = {0.5f, 0.7f, 1.3f};
  for (auto& m : mixes) m = normal(rng);
  for (auto& b : base) b = normal(rng);
  std::vector<float> pre(hc), post(hc), comb(hc * hc);
  HcSplitSinkhorn(mixes.data(), scale.data(), base.data(), hc, 20, 1e-6f, pre.data(), post.data(),
                  comb.data());
  for (int j = 0; j < hc; ++j) {
    float row = 0, col = 0;
    for (int k = 0; k < hc; ++k) {
      row += comb[j * hc + k];
      col += comb[k * hc + j];
    }
    EXPECT_NEAR(row, 1.0f, 2e-2f);  // rows converge more slowly
    EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last step normalises columns
    EXPECT_GT(pre[j], 0.0f);
    EXPECT_LT(post[j], 2.0f);
  }
}

}  // namespace
}  // namespace pdspark::kernels::cpu
