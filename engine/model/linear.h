// The projections of the forward, on the rank's compute threads: y = x . W^T with W in its
// checkpoint format (kernels/cpu/quant_gemm.h: every output computed the same way whatever
// the batch, the slice or the threads). Internal to the engine.
#pragma once

#include <cstdint>

#include "engine/model/rank_context.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/weight_matrix.h"

namespace pdspark::engine {

// y [m, w.rows] = x [m, w.cols] . w^T, contiguous rows.
inline void Linear(const RankContext& ctx, const float* x, int64_t m,
                   const kernels::WeightMatrix& w, float* y) {
  kernels::cpu::Gemm({x, m, w.cols, w, y, w.rows}, ctx.pool);
}

// The same with row strides: x rows ldx apart, y rows ldy apart.
inline void Linear(const RankContext& ctx, const float* x, int64_t m, int64_t ldx,
                   const kernels::WeightMatrix& w, float* y, int64_t ldy) {
  kernels::cpu::Gemm({x, m, ldx, w, y, ldy}, ctx.pool);
}

// y [m, n] = a [m, k] . b [n, k]^T for fp32 activations (attention scores and values).
inline void MatMulF32(const RankContext& ctx, const float* a, int64_t m, int64_t k, int64_t lda,
                      const float* b, int64_t n, int64_t ldb, float* y, int64_t ldy) {
  kernels::cpu::GemmF32(a, m, k, lda, b, n, ldb, y, ldy, ctx.pool);
}

}  // namespace pdspark::engine
