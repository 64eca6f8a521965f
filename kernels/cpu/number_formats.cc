// Decoding of the checkpoint's storage formats and round-to-nearest-even onto the FP8/FP4
// grids used by the quantise-dequantise simulations.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

// Rounds |value| onto a binary minifloat grid with `mantissa_bits` explicit bits whose smallest
// normal exponent is `min_exponent` (below it the grid is uniform: subnormals). The caller
// clamps to the format's maximum first, so no overflow handling is needed here.
float RoundToMiniFloat(float value, int mantissa_bits, int min_exponent) {
  if (value == 0.0f || !std::isfinite(value)) return value;
  int exponent = std::ilogb(value);  // floor(log2|value|), exact for normal floats
  if (exponent < min_exponent) exponent = min_exponent;
  const float step = std::ldexp(1.0f, exponent - mantissa_bits);
  // value / step is exact (power-of-two divisor); nearbyint rounds half to even.
  return std::nearbyint(value / step) * step;
}

}  // namespace

float Bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

float Fp8E4M3ToFloat(uint8_t bits) {
  const bool negative = bits & 0x80;
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  } else {
    magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  }
  return negative ? -magnitude : magnitude;
}

float E8M0ToFloat(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

float Fp4E2M1ToFloat(uint8_t nibble) {
  static constexpr float kTable[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kTable[nibble & 0xF];
}

float RoundToE4M3(float value) { return RoundToMiniFloat(value, 3, -6); }
float RoundToE2M1(float value) { return RoundToMiniFloat(value, 1, 0); }

}  // namespace pdspark::kernels::cpu
