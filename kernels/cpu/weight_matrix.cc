#include "kernels/weight_matrix.h"

#include "kernels/cpu/kernels.h"

namespace pdspark::kernels {

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "F32";
    case WeightFormat::kBF16:
      return "BF16";
    case WeightFormat::kFp8E4M3:
      return "F8_E4M3";
    case WeightFormat::kFp4E2M1:
      return "FP4_E2M1";
  }
  return "?";
}

int64_t WeightMatrix::Bytes() const {
  const int64_t n = rows * cols;
  switch (format) {
    case WeightFormat::kF32:
      return 4 * n;
    case WeightFormat::kBF16:
      return 2 * n;
    case WeightFormat::kFp8E4M3:
      return n + ((rows + kFp8ScaleBlock - 1) / kFp8ScaleBlock) *
                     ((cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
    case WeightFormat::kFp4E2M1:
      return n / 2 + rows * ((cols + kFp4ScaleBlock - 1) / kFp4ScaleBlock);
  }
  return 0;
}

float WeightMatrix::At(int64_t i, int64_t j) const {
  const int64_t row = row0 + i, col = col0 + j, index = row * row_stride + col;
  switch (format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(data)[index];
    case WeightFormat::kBF16:
      return cpu::Bf16ToFloat(static_cast<const uint16_t*>(data)[index]);
    case WeightFormat::kFp8E4M3:
      return cpu::Fp8E4M3ToFloat(static_cast<const uint8_t*>(data)[index]) *
             cpu::E8M0ToFloat(scales[(row / kFp8ScaleBlock) * scale_stride + col / kFp8ScaleBlock]);
    case WeightFormat::kFp4E2M1: {
      const uint8_t byte = static_cast<const uint8_t*>(data)[index / 2];
      return cpu::Fp4E2M1ToFloat(index % 2 == 0 ? byte & 0xF : byte >> 4) *
             cpu::E8M0ToFloat(scales[row * scale_stride + col / kFp4ScaleBlock]);
    }
  }
  return 0.0f;
}

}  // namespace pdspark::kernels
