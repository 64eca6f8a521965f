// The model's "QAT simulation": quantise to FP8/FP4 with power-of-two block scales and
// dequantise straight back, exactly as the reference act_quant / fp4_act_quant kernels do in
// place (scale = 2^ceil(log2(amax * (1/max))), clamp, cast, multiply back).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

// 2^ceil(log2(x)) from the IEEE bits, as the reference's fast_round_scale does.
float PowerOfTwoCeil(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const int exponent = static_cast<int>((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) ? 1 : 0);
  return std::bit_cast<float>(static_cast<uint32_t>(exponent + 127) << 23);
}

template <float (*Round)(float)>
void QuantDequantBlocks(float* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t block,
                        float max_value, float amax_floor) {
  const float max_inv = 1.0f / max_value;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = data + r * row_stride;
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
      const int64_t b1 = std::min(cols, b0 + block);
      float amax = 0.0f;
      for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(row[i]));
      amax = std::max(amax, amax_floor);
      const float scale = PowerOfTwoCeil(amax * max_inv);
      for (int64_t i = b0; i < b1; ++i) {
        const float scaled = std::clamp(row[i] / scale, -max_value, max_value);
        row[i] = Round(scaled) * scale;
      }
    }
  }
}

}  // namespace

void Fp8QuantDequant(float* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t block) {
  QuantDequantBlocks<RoundToE4M3>(data, rows, cols, row_stride, block, 448.0f, 1e-4f);
}

void Fp4QuantDequant(float* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t block) {
  QuantDequantBlocks<RoundToE2M1>(data, rows, cols, row_stride, block, 6.0f,
                                  6.0f * std::ldexp(1.0f, -126));
}

}  // namespace pdspark::kernels::cpu
