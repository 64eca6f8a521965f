#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

TEST(Fp8QuantDequant, PowerOfTwoScaleAndRounding) {
  // amax 3.3: scale = 2^ceil(log2(3.3/448)) = 2^-7; 3.3*128 = 422.4 -> 416 (grid step 32).
  std::vector<float> x = {3.3f, -1.0f, 0.01f, 0.0f};
  Fp8QuantDequant(x.data(), 1, 4, 4, 4);
  EXPECT_EQ(x[0], 416.0f / 128);
  EXPECT_EQ(x[1], -1.0f);        // 128 is on the grid
  EXPECT_EQ(x[2], 1.25f / 128);  // 1.28 -> 1.25 (step 1/8 in [1,2))
  EXPECT_EQ(x[3], 0.0f);
}

TEST(Fp8QuantDequant, BlocksAreIndependentAndStrideRespected) {
  // Two rows of stride 5, 4 quantised columns in blocks of 2; the 5th column is untouched.
  std::vector<float> x = {448.0f, 1.0f, 0.5f, 0.3f, 9.99f, 2.0f, 2.0f, 1e-6f, 0.0f, 7.77f};
  Fp8QuantDequant(x.data(), 2, 4, 5, 2);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 1.0f);
  // block (0.5, 0.3): scale 2^ceil(log2(0.5/448)) = 2^-9; 0.3*512 = 153.6 -> 160 (step 16).
  EXPECT_EQ(x[3], 160.0f / 512);
  EXPECT_EQ(x[4], 9.99f);
  // block (1e-6, 0): amax floored to 1e-4 -> scale 2^-22; 1e-6 * 2^22 = 4.19 -> 4.
  EXPECT_EQ(x[7], 4.0f * std::ldexp(1.0f, -22));
  EXPECT_EQ(x[9], 7.77f);
}

TEST(Fp4QuantDequant, ScaleAndGrid) {
  // amax 5 -> scale 2^ceil(log2(5/6)) = 1; values land on the E2M1 grid.
  std::vector<float> x = {5.0f, -2.6f, 0.2f, 1.3f};
  Fp4QuantDequant(x.data(), 1, 4, 4, 4);
  EXPECT_EQ(x[0], 4.0f);
  EXPECT_EQ(x[1], -3.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 1.5f);
  // amax 12 -> scale 2: 12 -> 6*2, 7 -> 3.5 -> 4 -> 8.
  std::vector<float> y = {12.0f, 7.0f};
  Fp4QuantDequant(y.data(), 1, 2, 2, 2);
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(y[1], 8.0f);
}

}  // namespace
}  // namespace pdspark::kernels::cpu
