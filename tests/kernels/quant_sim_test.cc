#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
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

// The rounding as the reference defines it, with the library's calls: floor(log2|v|), the grid's
// step, round half to even.
float RoundToGridByLibrary(float value, int mantissa_bits, int min_exponent) {
  if (value == 0.0f || !std::isfinite(value)) return value;
  const int exponent = std::max(std::ilogb(value), min_exponent);
  const float step = std::ldexp(1.0f, exponent - mantissa_bits);
  return std::nearbyint(value / step) * step;
}

// The reference's steps one value at a time: the power-of-two scale of the block, the clamp, the
// rounding.
std::vector<float> ScalarQuantDequant(std::vector<float> x, int64_t block, bool fp4) {
  const float max_value = fp4 ? 6.0f : 448.0f;
  const float floor = fp4 ? 6.0f * std::ldexp(1.0f, -126) : 1e-4f;
  for (size_t b0 = 0; b0 < x.size(); b0 += block) {
    const size_t b1 = std::min(x.size(), b0 + block);
    float amax = 0.0f;
    for (size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, floor);
    const float scale = std::exp2(std::ceil(std::log2(static_cast<double>(amax / max_value))));
    for (size_t i = b0; i < b1; ++i) {
      const float scaled = std::clamp(x[i] / scale, -max_value, max_value);
      x[i] =
          (fp4 ? RoundToGridByLibrary(scaled, 1, 0) : RoundToGridByLibrary(scaled, 3, -6)) * scale;
    }
  }
  return x;
}

// Random blocks over the whole float range: ties, zeros of both signs, subnormals, outliers that
// push the rest of a block below the format's smallest normal. Bit for bit.
TEST(QuantDequant, GivesTheScalarDefinitionsBits) {
  std::mt19937 rng(11);
  for (bool fp4 : {false, true}) {
    for (int trial = 0; trial < 2000; ++trial) {
      const int64_t block = fp4 ? 32 : 128;
      std::vector<float> x(2 * block);
      const int center = static_cast<int>(rng() % 200) - 100;
      for (float& v : x) {
        const uint32_t kind = rng() % 8;
        if (kind == 0) {
          v = (rng() % 2 ? -0.0f : 0.0f);
        } else if (kind == 1) {  // a subnormal
          v = std::bit_cast<float>(static_cast<uint32_t>(rng() & 0x807FFFFFu));
        } else if (kind == 2) {  // halfway between two grid points of some scale
          v = std::ldexp(static_cast<float>(static_cast<int>(rng() % 64) - 32) + 0.5f,
                         center + static_cast<int>(rng() % 8) - 4);
        } else {
          v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                         center + static_cast<int>(rng() % 40) - 20);
        }
      }
      const std::vector<float> expected = ScalarQuantDequant(x, block, fp4);
      std::vector<float> got = x;
      (fp4 ? Fp4QuantDequant : Fp8QuantDequant)(got.data(), 1, 2 * block, 2 * block, block);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(expected[i]))
            << (fp4 ? "FP4" : "FP8") << " trial " << trial << " value " << x[i] << " got " << got[i]
            << " want " << expected[i];
      }
    }
  }
}

}  // namespace
}  // namespace pdspark::kernels::cpu
