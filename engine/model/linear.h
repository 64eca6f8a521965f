// The projections of the forward on the rank's backend: y = x . W^T with W in its checkpoint
// format (every output computed the same way whatever the batch, the slice or the threads).
// Internal to the engine.
#pragma once

#include <cstdint>

#include "engine/model/rank_context.h"
#include "kernels/weight_matrix.h"

namespace pdspark::engine {

// y [m, w.rows] = x [m, w.cols] . w^T, contiguous rows.
inline void Linear(const RankContext& ctx, const float* x, int64_t m,
                   const kernels::WeightMatrix& w, float* y) {
  ctx.ops().Gemm({x, m, w.cols, w, y, w.rows});
}

// The same with row strides: x rows ldx apart, y rows ldy apart.
inline void Linear(const RankContext& ctx, const float* x, int64_t m, int64_t ldx,
                   const kernels::WeightMatrix& w, float* y, int64_t ldy) {
  ctx.ops().Gemm({x, m, ldx, w, y, ldy});
}

// An fp32 [rows, cols] matrix with rows `stride` apart, as a weight view.
inline kernels::WeightMatrix F32Matrix(const float* data, int64_t rows, int64_t cols,
                                       int64_t stride) {
  kernels::WeightMatrix w;
  w.data = data;
  w.rows = rows;
  w.cols = cols;
  w.row_stride = stride;
  return w;
}

}  // namespace pdspark::engine
