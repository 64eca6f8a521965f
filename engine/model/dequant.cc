#include "engine/model/dequant.h"

#include "kernels/cpu/kernels.h"

namespace pdspark::engine {

namespace kc = ::pdspark::kernels::cpu;

std::vector<float> DequantFp8Blocks(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block) {
  return DequantFp8Blocks(weight, scale, rows, cols, block, Rect{0, rows, 0, cols});
}

std::vector<float> DequantFp8Blocks(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t /*rows*/, int64_t cols, int64_t block,
                                    const Rect& rect) {
  const int64_t scale_cols = (cols + block - 1) / block;
  // Decode each of the 256 codes once.
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = kc::Fp8E4M3ToFloat(static_cast<uint8_t>(c));
  std::vector<float> out(rect.rows() * rect.cols());
  float* dst = out.data();
  for (int64_t i = rect.row_begin; i < rect.row_end; ++i) {
    const uint8_t* scale_row = scale.data() + (i / block) * scale_cols;
    for (int64_t j = rect.col_begin; j < rect.col_end; ++j) {
      *dst++ = table[weight[i * cols + j]] * kc::E8M0ToFloat(scale_row[j / block]);
    }
  }
  return out;
}

std::vector<float> DequantFp4Packed(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block) {
  return DequantFp4Packed(weight, scale, rows, cols, block, Rect{0, rows, 0, cols});
}

std::vector<float> DequantFp4Packed(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t /*rows*/, int64_t cols, int64_t block,
                                    const Rect& rect) {
  const int64_t scale_cols = cols / block;
  std::vector<float> out(rect.rows() * rect.cols());
  float* dst = out.data();
  for (int64_t i = rect.row_begin; i < rect.row_end; ++i) {
    for (int64_t j = rect.col_begin; j < rect.col_end; ++j) {
      const uint8_t byte = weight[i * (cols / 2) + j / 2];
      const uint8_t nibble = (j % 2 == 0) ? (byte & 0xF) : (byte >> 4);
      *dst++ = kc::Fp4E2M1ToFloat(nibble) * kc::E8M0ToFloat(scale[i * scale_cols + j / block]);
    }
  }
  return out;
}

std::vector<float> Bf16ToFloatVector(std::span<const uint16_t> values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = kc::Bf16ToFloat(values[i]);
  return out;
}

}  // namespace pdspark::engine
