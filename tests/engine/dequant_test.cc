#include "engine/model/dequant.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

TEST(DequantFp8Blocks, BlockScalesApplyPerTile) {
  // 3x3 weight with 2x2 blocks: scale tiles [[2^0, 2^1], [2^-1, 2^3]] (E8M0 127, 128, 126, 130).
  const std::vector<uint8_t> w = {0x38, 0x3C, 0xB8,   // 1, 1.5, -1
                                  0x40, 0x00, 0x7E,   // 2, 0, 448
                                  0x01, 0x30, 0x38};  // 2^-9, 0.5, 1
  const std::vector<uint8_t> s = {127, 128, 126, 130};
  const std::vector<float> out = DequantFp8Blocks(w, s, 3, 3, 2);
  const std::vector<float> expected = {1, 1.5f, -2, 2, 0, 896, std::ldexp(1.0f, -10), 0.25f, 8};
  EXPECT_EQ(out, expected);
}

TEST(DequantFp4Packed, LowNibbleFirstAndPer32Scales) {
  // One row of 64 values: bytes 0x21 -> elements (1: 0.5, 2: 1.0); scale block 0 = 2, block 1 = 1/4.
  std::vector<uint8_t> w(32, 0x00);
  w[0] = 0x21;   // elements 0, 1 -> 0.5, 1.0
  w[15] = 0xF7;  // elements 30, 31 -> 6, -6
  w[16] = 0x9A;  // elements 32, 33 -> -1, -0.5
  const std::vector<uint8_t> s = {128, 125};
  const std::vector<float> out = DequantFp4Packed(w, s, 1, 64, 32);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[30], 12.0f);
  EXPECT_EQ(out[31], -12.0f);
  EXPECT_EQ(out[32], -0.25f);
  EXPECT_EQ(out[33], -0.125f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(Bf16ToFloatVector, ExactWidening) {
  EXPECT_EQ(Bf16ToFloatVector(std::vector<uint16_t>{0x3F80, 0xBF00}),
            (std::vector<float>{1.0f, -0.5f}));
}

}  // namespace
}  // namespace pdspark::engine
