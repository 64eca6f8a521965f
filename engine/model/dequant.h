// Dequantisation of the checkpoint's weight formats into fp32 row-major matrices. Pure
// functions over raw bytes so they can be tested bit-exactly without files.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pdspark::engine {

// FP8 E4M3 [rows, cols] with E8M0 scales [ceil(rows/block), ceil(cols/block)]:
// W[i, j] = w8[i, j] * S[i / block, j / block].
std::vector<float> DequantFp8Blocks(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block = 128);

// FP4 E2M1 packed two per byte ([rows, cols/2]; element 2i in the low nibble) with E8M0 scales
// [rows, cols/block]: W[i, j] = fp4[i, j] * S[i, j / block].
std::vector<float> DequantFp4Packed(std::span<const uint8_t> weight, std::span<const uint8_t> scale,
                                    int64_t rows, int64_t cols, int64_t block = 32);

std::vector<float> Bf16ToFloatVector(std::span<const uint16_t> values);

}  // namespace pdspark::engine
