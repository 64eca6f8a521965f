// y = x * W^T for a few rows of x (decode steps, verify rounds, drafter blocks): a row-batched
// dot-product kernel that reads each weight row once for up to four rows of x.
//
// Why not OpenBLAS here: its sgemm either runs a small-matrix kernel that is latency-bound on
// one accumulator chain or, from about four rows on, packs the whole weight matrix on every
// call. For the 1-16 rows a decode or verify step feeds, both took up to 3.5x the time it takes to
// stream the weights once (docs/perf.md, "Few-rows GEMM kernel and weights in huge pages"),
// and made every verify row cost more than the arithmetic it adds.
//
// Every output element is computed by the same sequence of operations whatever m, n, the row's
// place in its group of four or the column's place in the matrix: two 8-lane accumulators over
// alternate 8-wide blocks of k, an 8-wide remainder block into the first, their lane sum in a
// fixed order, then the scalar remainder. So a row's result does not depend on what else is in
// the batch (up to kFewRowsMax rows) and a column slice equals the same columns of the whole.
#include "kernels/cpu/gemm_few_rows.h"

#include <atomic>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pdspark::kernels::cpu {
namespace {
std::atomic<bool> few_rows_enabled{true};
}  // namespace

void SetFewRowsGemm(bool enabled) { few_rows_enabled = enabled; }

#if defined(__x86_64__)
namespace {

#define PDSPARK_AVX2 __attribute__((target("avx2,fma")))

PDSPARK_AVX2 inline float LaneSum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// One weight row against R rows of x.
template <int R>
PDSPARK_AVX2 inline void DotRows(const float* x, int64_t ldx, int64_t k, const float* w, float* y,
                                 int64_t ldy) {
  __m256 even[R], odd[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) even[i] = odd[i] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    const __m256 w0 = _mm256_loadu_ps(w + p), w1 = _mm256_loadu_ps(w + p + 8);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      even[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + p), even[i]);
      odd[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * ldx + p + 8), odd[i]);
    }
  }
  if (p + 8 <= k) {
    const __m256 w0 = _mm256_loadu_ps(w + p);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      even[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + p), even[i]);
    p += 8;
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = LaneSum(_mm256_add_ps(even[i], odd[i]));
    for (int64_t q = p; q < k; ++q) sum += x[i * ldx + q] * w[q];
    y[i * ldy] = sum;
  }
}

template <int R>
PDSPARK_AVX2 void AllColumns(const float* x, int64_t ldx, int64_t k, const float* w, int64_t n,
                             int64_t ldw, float* y, int64_t ldy) {
  for (int64_t j = 0; j < n; ++j) DotRows<R>(x, ldx, k, w + j * ldw, y + j, ldy);
}

bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

}  // namespace

bool MatMulTransBFewRows(const float* x, int64_t m, int64_t k, int64_t ldx, const float* w,
                         int64_t n, int64_t ldw, float* y, int64_t ldy) {
  if (m > kFewRowsMax || !few_rows_enabled.load(std::memory_order_relaxed) || !CpuHasAvx2Fma()) {
    return false;
  }
  // Groups of four rows share each weight row while it is in registers and L1.
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) AllColumns<4>(x + i * ldx, ldx, k, w, n, ldw, y + i * ldy, ldy);
  const float* xr = x + i * ldx;
  float* yr = y + i * ldy;
  switch (m - i) {
    case 3:
      AllColumns<3>(xr, ldx, k, w, n, ldw, yr, ldy);
      break;
    case 2:
      AllColumns<2>(xr, ldx, k, w, n, ldw, yr, ldy);
      break;
    case 1:
      AllColumns<1>(xr, ldx, k, w, n, ldw, yr, ldy);
      break;
    default:
      break;
  }
  return true;
}

#else  // not x86-64: OpenBLAS handles every shape.

bool MatMulTransBFewRows(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                         float*, int64_t) {
  return false;
}

#endif

}  // namespace pdspark::kernels::cpu
