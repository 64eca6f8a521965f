#include "kernels/cpu/fp8_kv_row.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

constexpr float kE4M3Max = 448.0f;
constexpr int kE8M0Bias = 127;

// Every E4M3 code's value, so decoding a row is a table lookup and one exact multiply.
const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int bits = 0; bits < 256; ++bits) t[bits] = Fp8E4M3ToFloat(static_cast<uint8_t>(bits));
    return t;
  }();
  return table;
}

// The smallest k with amax <= 448 * 2^k, within E8M0's range.
int ScaleExponent(float amax) {
  if (amax == 0.0f) return 0;
  int k = std::ilogb(amax) - 8;
  while (amax > std::ldexp(kE4M3Max, k)) ++k;
  while (amax <= std::ldexp(kE4M3Max, k - 1)) --k;
  return std::clamp(k, -kE8M0Bias, kE8M0Bias);
}

}  // namespace

uint8_t FloatToFp8E4M3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = RoundToE4M3(std::min(std::fabs(value), kE4M3Max));
  if (magnitude < std::ldexp(1.0f, -6)) {
    // Subnormal: magnitude = m / 8 * 2^-6.
    return sign | static_cast<uint8_t>(std::ldexp(magnitude, 9));
  }
  const int exponent = std::ilogb(magnitude);
  const int mantissa = static_cast<int>(std::ldexp(magnitude, 3 - exponent)) - 8;
  return sign | static_cast<uint8_t>((exponent + 7) << 3) | static_cast<uint8_t>(mantissa);
}

void Fp8KvRow::Encode(const float* values, uint8_t* row) const {
  uint8_t* scales = row + nope_dim;
  for (int64_t b = 0; b < num_scales(); ++b) {
    const int64_t begin = b * block, end = std::min(nope_dim, begin + block);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(values[i]));
    const int k = ScaleExponent(amax);
    scales[b] = static_cast<uint8_t>(k + kE8M0Bias);
    for (int64_t i = begin; i < end; ++i) row[i] = FloatToFp8E4M3(std::ldexp(values[i], -k));
  }
  std::fill(row + nope_dim + num_scales(), row + rope_offset(), uint8_t{0});
  std::memcpy(row + rope_offset(), values + nope_dim, (head_dim - nope_dim) * sizeof(float));
}

void Fp8KvRow::Decode(const uint8_t* row, float* values) const {
  const std::array<float, 256>& table = E4M3Table();
  const uint8_t* scales = row + nope_dim;
  for (int64_t b = 0; b < num_scales(); ++b) {
    const float scale = E8M0ToFloat(scales[b]);
    const int64_t begin = b * block, end = std::min(nope_dim, begin + block);
    for (int64_t i = begin; i < end; ++i) values[i] = table[row[i]] * scale;
  }
  std::memcpy(values + nope_dim, row + rope_offset(), (head_dim - nope_dim) * sizeof(float));
}

}  // namespace pdspark::kernels::cpu
