#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

TEST(Hadamard, SylvesterOrder) {
  // H_4 rows: [1 1 1 1], [1 -1 1 -1], [1 1 -1 -1], [1 -1 -1 1]; e_1 maps to column 1.
  std::vector<float> x = {0, 1, 0, 0};
  HadamardTransform(x.data(), 4, 0.5f);
  EXPECT_EQ(x, (std::vector<float>{0.5f, -0.5f, 0.5f, -0.5f}));
  std::vector<float> y = {1, 2, 3, 4};
  HadamardTransform(y.data(), 4, 0.5f);
  EXPECT_EQ(y, (std::vector<float>{5, -1, -2, 0}));
  HadamardTransform(y.data(), 4, 0.5f);  // orthonormal and symmetric: its own inverse
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
}

TEST(TopK, LargestFirstLowerIndexOnTies) {
  std::vector<float> v = {0.5f, 2.0f, 2.0f, -1.0f, 3.0f};
  EXPECT_EQ(TopK(v, 3), (std::vector<int32_t>{4, 1, 2}));
  EXPECT_EQ(TopK(v, 10).size(), 5u);
  EXPECT_TRUE(TopK(v, 0).empty());
}

TEST(Norms, RmsNormWeighted) {
  std::vector<float> x = {3, 4}, w = {2, 0.5f}, y(2);
  RmsNorm(x.data(), w.data(), 1, 2, 0.0f, y.data());
  const float inv = 1.0f / std::sqrt(12.5f);
  EXPECT_FLOAT_EQ(y[0], 2 * 3 * inv);
  EXPECT_FLOAT_EQ(y[1], 0.5f * 4 * inv);
}

TEST(Activations, SwiGluClampAndSqrtSoftplus) {
  std::vector<float> gate = {20.0f, -1.0f}, up = {-30.0f, 2.0f}, out(2);
  SwiGlu(gate.data(), up.data(), 2, 10.0f, out.data());
  EXPECT_FLOAT_EQ(out[0], Silu(10.0f) * -10.0f);  // gate capped at 10, up clamped to -10
  EXPECT_FLOAT_EQ(out[1], Silu(-1.0f) * 2.0f);
  SwiGlu(gate.data(), up.data(), 2, 0.0f, out.data());  // no clamp (shared expert)
  EXPECT_FLOAT_EQ(out[0], Silu(20.0f) * -30.0f);
  EXPECT_FLOAT_EQ(SqrtSoftplus(0.0f), std::sqrt(std::log(2.0f)));
  EXPECT_FLOAT_EQ(SqrtSoftplus(25.0f), 5.0f);  // softplus threshold 20: identity
}

}  // namespace
}  // namespace pdspark::kernels::cpu
