// Weights requantised to MXINT8 (kernels/weight_matrix.h: int8 codes, one E8M0 scale per 32
// inputs of a row), for the int8 dot (quant_gemm.h, GemmPrecision::kInt8Dot), which multiplies
// such codes as integers. Lossy: each 32-input group of a row gets the smallest power-of-two
// scale under which its largest magnitude fits in 127 codes, and every value is rounded to the
// nearest code (ties to even), so an element moves by at most half a code step, which is at
// most |largest in its group| / 127.
#pragma once

#include <cstdint>

#include "kernels/weight_matrix.h"

namespace pdspark::kernels::cpu {

// Scales per row of an MXINT8 tensor with `cols` columns.
inline int64_t MxInt8ScalesPerRow(int64_t cols) {
  return (cols + kMxInt8ScaleBlock - 1) / kMxInt8ScaleBlock;
}

// View rows [begin, end) of `w` (any format) requantised: their codes into `codes` (row stride
// w.cols) and their scales into `scales` (row stride MxInt8ScalesPerRow(w.cols)), the groups
// counted from the view's column 0.
void QuantizeRowsToMxInt8(const WeightMatrix& w, int64_t begin, int64_t end, int8_t* codes,
                          uint8_t* scales);

// All of `w` requantised into `codes` (w.rows x w.cols) and `scales` (w.rows x
// MxInt8ScalesPerRow(w.cols)): the MXINT8 matrix over them.
WeightMatrix RequantiseToMxInt8(const WeightMatrix& w, int8_t* codes, uint8_t* scales);

}  // namespace pdspark::kernels::cpu
