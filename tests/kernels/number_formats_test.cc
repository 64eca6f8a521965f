#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

TEST(NumberFormats, Bf16) {
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC040), -3.0f);
  EXPECT_EQ(Bf16ToFloat(0x3E00), 0.125f);
}

TEST(NumberFormats, Fp8E4M3HandValues) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);  // exponent 7 = bias, mantissa 0
  EXPECT_EQ(Fp8E4M3ToFloat(0xB8), -1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x3C), 1.5f);                  // mantissa 4/8
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);                // largest finite: 1.75 * 2^8
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0.015625f);             // smallest normal 2^-6
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7F)));
}

// Every code against the formats' definitions, computed independently with ldexp (the decoders
// in kernels/number_formats.h build the fp32 bits directly, for the host and CUDA devices).
TEST(NumberFormats, EveryFp8AndE8M0CodeMatchesItsDefinition) {
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    const float sign = (code & 0x80) ? -1.0f : 1.0f;
    const float fp8 = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
    if (exponent == 0xF && mantissa == 0x7) {
      EXPECT_TRUE(std::isnan(fp8)) << code;
    } else {
      const float expected = exponent == 0
                                 ? sign * std::ldexp(float(mantissa), -9)
                                 : sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
      EXPECT_EQ(fp8, expected) << code;
      EXPECT_EQ(std::signbit(fp8), (code & 0x80) != 0) << code;  // -0 included
    }
    const float e8m0 = E8M0ToFloat(static_cast<uint8_t>(code));
    if (code == 255) {
      EXPECT_TRUE(std::isnan(e8m0));
    } else {
      EXPECT_EQ(e8m0, std::ldexp(1.0f, code - 127)) << code;
    }
  }
}

TEST(NumberFormats, E8M0) {
  EXPECT_EQ(E8M0ToFloat(127), 1.0f);
  EXPECT_EQ(E8M0ToFloat(130), 8.0f);
  EXPECT_EQ(E8M0ToFloat(120), 1.0f / 128);
  EXPECT_EQ(E8M0ToFloat(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(E8M0ToFloat(255)));
}

TEST(NumberFormats, Fp4E2M1Table) {
  const float expected[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Fp4E2M1ToFloat(i), expected[i]) << i;
  EXPECT_TRUE(std::signbit(Fp4E2M1ToFloat(8)));
}

TEST(NumberFormats, RoundToE4M3NearestEven) {
  EXPECT_EQ(RoundToE4M3(17.0f), 16.0f);    // tie between 16 (even) and 18
  EXPECT_EQ(RoundToE4M3(19.0f), 20.0f);    // tie between 18 and 20 (even)
  EXPECT_EQ(RoundToE4M3(116.0f), 112.0f);  // tie 112 (1.75*64, odd? no: 112 = 1.110b) vs 120
  EXPECT_EQ(RoundToE4M3(116.0001f), 120.0f);
  EXPECT_EQ(RoundToE4M3(-115.999f), -112.0f);
  EXPECT_EQ(RoundToE4M3(440.0f), 448.0f);
  EXPECT_EQ(RoundToE4M3(std::ldexp(1.0f, -10)), 0.0f);  // half the smallest subnormal -> 0
  EXPECT_EQ(RoundToE4M3(3 * std::ldexp(1.0f, -10)), std::ldexp(1.0f, -8));  // 1.5 ulp -> 2 ulp
  EXPECT_EQ(RoundToE4M3(0.0f), 0.0f);
}

TEST(NumberFormats, RoundToE2M1NearestEven) {
  EXPECT_EQ(RoundToE2M1(0.25f), 0.0f);
  EXPECT_EQ(RoundToE2M1(0.26f), 0.5f);
  EXPECT_EQ(RoundToE2M1(0.75f), 1.0f);
  EXPECT_EQ(RoundToE2M1(1.25f), 1.0f);
  EXPECT_EQ(RoundToE2M1(1.75f), 2.0f);
  EXPECT_EQ(RoundToE2M1(2.5f), 2.0f);
  EXPECT_EQ(RoundToE2M1(3.5f), 4.0f);
  EXPECT_EQ(RoundToE2M1(5.0f), 4.0f);
  EXPECT_EQ(RoundToE2M1(5.01f), 6.0f);
  EXPECT_EQ(RoundToE2M1(-2.9f), -3.0f);
}

}  // namespace
}  // namespace pdspark::kernels::cpu
