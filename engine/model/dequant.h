// Dequantisation of the checkpoint's weight formats into fp32 row-major matrices. Pure
// functions over raw bytes so they can be tested bit-exactly without files.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pdspark::engine {

// Rows [row_begin, row_end) x columns [col_begin, col_end) of a [rows, cols] tensor: what a
// tensor-parallel rank dequantises of a sharded weight.
struct Rect {
  int64_t row_begin = 0, row_end = 0;
  int64_t col_begin = 0, col_end = 0;
  int64_t rows() const { return row_end - row_begin; }
  int64_t cols() const { return col_end - col_begin; }
};

// FP8 E4M3 [rows, cols] with E8M0 scales [ceil(rows/block), ceil(cols/block)]:
// W[i, j] = w8[i, j] * S[i / block, j / block].
std::vector<float> DequantFp8Blocks(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block = 128);
// Only `rect` of it, [rect.rows(), rect.cols()].
std::vector<float> DequantFp8Blocks(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block, const Rect& rect);

// FP4 E2M1 packed two per byte ([rows, cols/2]; element 2i in the low nibble) with E8M0 scales
// [rows, cols/block]: W[i, j] = fp4[i, j] * S[i, j / block].
std::vector<float> DequantFp4Packed(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block = 32);
// Only `rect` of it, [rect.rows(), rect.cols()].
std::vector<float> DequantFp4Packed(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block, const Rect& rect);

std::vector<float> Bf16ToFloatVector(std::span<const uint16_t> values);

}  // namespace pdspark::engine
