// The GEMM path MatMulTransB takes for few rows (see gemm_few_rows.cc for why and for its
// batch-invariance guarantee).
#pragma once

#include <cstdint>

namespace pdspark::kernels::cpu {

// Up to this many rows the row-batched kernel beats OpenBLAS on this project's shapes
// (docs/perf.md); above it OpenBLAS's packed kernels win.
inline constexpr int64_t kFewRowsMax = 16;

// y[m, n] = x[m, k] * w[n, k]^T when m <= kFewRowsMax and the CPU has AVX2 and FMA; returns
// false (and writes nothing) otherwise.
bool MatMulTransBFewRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                         int64_t n, int64_t ldw, float* y, int64_t ldy);

// Process-wide switch (default on); off sends every GEMM to OpenBLAS. For benchmarks that
// compare the two paths in one run (pdspark_model_bench --variants).
void SetFewRowsGemm(bool enabled);

}  // namespace pdspark::kernels::cpu
