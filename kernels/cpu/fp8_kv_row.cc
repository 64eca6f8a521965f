#include "kernels/cpu/fp8_kv_row.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels::cpu {
namespace {

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

}  // namespace

void Fp8KvRow::Encode(const float* values, uint8_t* row) const {
  uint8_t* scales = row + nope_dim;
  for (int64_t b = 0; b < num_scales(); ++b) {
    const int64_t begin = b * block, end = std::min(nope_dim, begin + block);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(values[i]));
    const int k = Fp8ScaleExponent(amax);
    scales[b] = static_cast<uint8_t>(k + kE8M0Bias);
    for (int64_t i = begin; i < end; ++i) row[i] = FloatToFp8E4M3(ldexpf(values[i], -k));
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
