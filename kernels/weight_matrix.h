// How a weight matrix sits in memory in the checkpoint's own format: the descriptor every GEMM
// kernel (CPU now, CUDA later) takes, so weights are used in place, dequantised inside the
// kernel. A leaf: no dependencies beyond the standard library and kernels/number_formats.h; it
// compiles for CUDA devices too (At).
//
// A WeightMatrix is a rectangle [row0, row0 + rows) x [col0, col0 + cols) of a row-major
// [out, in] tensor. Block scales are indexed by the element's position in the whole tensor,
// so a tensor-parallel slice is a view of the same bytes, never a copy.
#pragma once

#include <cstdint>

#include "kernels/number_formats.h"

namespace pdspark::kernels {

enum class WeightFormat : uint8_t {
  kF32,
  kBF16,
  // FP8 E4M3 codes, one E8M0 scale per 128 x 128 block: scales [ceil(R/128), ceil(C/128)].
  kFp8E4M3,
  // FP4 E2M1 codes two per byte (element 2i in the low nibble), one E8M0 scale per 32 inputs
  // of a row: scales [R, C/32].
  kFp4E2M1,
  // Int8 codes, one E8M0 scale per 32 inputs of a row: scales [R, C/32]; an element is
  // code * 2^-6 * scale (the OCP MX MXINT8 format). Not a checkpoint format: FP8 matrices are
  // requantised to it at load for the int8 dot (WeightStorage::kInt8), where an int8 code
  // multiplies as an integer.
  kMxInt8,
};

inline constexpr int64_t kFp8ScaleBlock = 128;
inline constexpr int64_t kFp4ScaleBlock = 32;
inline constexpr int64_t kMxInt8ScaleBlock = 32;
// An MXINT8 code's weight: the code times this times its block's scale.
inline constexpr float kMxInt8CodeUnit = 1.0f / 64.0f;

const char* WeightFormatName(WeightFormat format);

// Bits of one element's code, its block scales apart.
constexpr int64_t CodeBits(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return 32;
    case WeightFormat::kBF16:
      return 16;
    case WeightFormat::kFp8E4M3:
    case WeightFormat::kMxInt8:
      return 8;
    case WeightFormat::kFp4E2M1:
      return 4;
  }
  return 32;
}

struct WeightMatrix {
  WeightFormat format = WeightFormat::kF32;
  const void* data = nullptr;       // the whole tensor's element (0, 0)
  int64_t row_stride = 0;           // elements per tensor row (the tensor's column count)
  int64_t row0 = 0, col0 = 0;       // this view's origin in the tensor
  int64_t rows = 0, cols = 0;       // output features, input features
  const uint8_t* scales = nullptr;  // E8M0 block scales of the whole tensor (quantised formats)
  int64_t scale_stride = 0;         // scales per scale row

  // Rows [begin, end) / columns [begin, end) of this view.
  WeightMatrix RowSlice(int64_t begin, int64_t end) const {
    WeightMatrix m = *this;
    m.row0 += begin;
    m.rows = end - begin;
    return m;
  }
  WeightMatrix ColSlice(int64_t begin, int64_t end) const {
    WeightMatrix m = *this;
    m.col0 += begin;
    m.cols = end - begin;
    return m;
  }
  // Bytes this view's codes and scales occupy (what a GEMM over it reads from memory).
  int64_t Bytes() const;
  // Element (i, j) of the view as the fp32 value it encodes (exact: every format widens to fp32
  // without rounding, and the power-of-two scale multiplies exactly unless it underflows).
  PDSPARK_HOST_DEVICE float At(int64_t i, int64_t j) const {
    const int64_t row = row0 + i, col = col0 + j, index = row * row_stride + col;
    switch (format) {
      case WeightFormat::kF32:
        return static_cast<const float*>(data)[index];
      case WeightFormat::kBF16:
        return Bf16ToFloat(static_cast<const uint16_t*>(data)[index]);
      case WeightFormat::kFp8E4M3:
        return Fp8E4M3ToFloat(static_cast<const uint8_t*>(data)[index]) *
               E8M0ToFloat(scales[(row / kFp8ScaleBlock) * scale_stride + col / kFp8ScaleBlock]);
      case WeightFormat::kFp4E2M1: {
        const uint8_t byte = static_cast<const uint8_t*>(data)[index / 2];
        return Fp4E2M1ToFloat(index % 2 == 0 ? byte & 0xF : byte >> 4) *
               E8M0ToFloat(scales[row * scale_stride + col / kFp4ScaleBlock]);
      }
      case WeightFormat::kMxInt8:
        return static_cast<float>(static_cast<const int8_t*>(data)[index]) *
               (E8M0ToFloat(scales[row * scale_stride + col / kMxInt8ScaleBlock]) *
                kMxInt8CodeUnit);
    }
    return 0.0f;
  }
};

// The column granularity a CPU GEMM needs in a quantised view: a 16-wide vector of inputs must
// not straddle a scale block nor start inside a packed byte.
inline constexpr int64_t kCpuColumnAlignment = 16;

}  // namespace pdspark::kernels
