// The GEMM tiles on AVX-512 (F, BW, VL, DQ, VBMI) with F16C, over the vector type of
// quant_gemm_avx512_vec.h, and the double dots.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/quant_gemm_internal.h"

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,f16c,fma")

namespace pdspark::kernels::cpu::internal {
namespace avx512 {

#include "kernels/cpu/quant_gemm_avx512_vec.h"
#include "kernels/cpu/quant_gemm_tiles.h"

// The panels of quant_gemm_tiles.h: by the dot tiles.
template <WeightFormat F>
void Panels(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* scratch) {
  PanelsByDots<F>(p, i0, i1, j0, j1, scratch);
}

// The canonical double dot: 8 double lanes, lane l summing a[p] * b[p] for p = l, l + 8, ...
// (each product exact in double), then (l, l+4), (l, l+2), (l, l+1).
double DotDouble(const float* a, const float* b, int64_t n) {
  __m512d acc = _mm512_setzero_pd();
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    acc = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + p)),
                          _mm512_cvtps_pd(_mm256_loadu_ps(b + p)), acc);
  }
  if (p < n) {
    const __mmask8 m = static_cast<__mmask8>((1u << (n - p)) - 1);
    acc = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, a + p)),
                          _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, b + p)), acc);
  }
  const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

// acc[c] += weight * x[c] in double, fused (one rounding per element).
void AddScaledDouble(double weight, const float* x, int64_t n, double* acc) {
  const __m512d w = _mm512_set1_pd(weight);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    _mm512_storeu_pd(acc + c, _mm512_fmadd_pd(w, _mm512_cvtps_pd(_mm256_loadu_ps(x + c)),
                                              _mm512_loadu_pd(acc + c)));
  }
  for (; c < n; ++c) acc[c] = std::fma(weight, static_cast<double>(x[c]), acc[c]);
}

// Rows [i, i + G) of DotDoubleRows: x widened once per 8 inputs for G rows.
template <int G>
void DotDoubleRowGroup(const float* x, const double* rows, int64_t ld, int64_t n, double* out) {
  __m512d acc[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_pd();
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    const __m512d xd = _mm512_cvtps_pd(_mm256_loadu_ps(x + p));
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      acc[g] = _mm512_fmadd_pd(_mm512_loadu_pd(rows + g * ld + p), xd, acc[g]);
    }
  }
  if (p < n) {
    const __mmask8 m = static_cast<__mmask8>((1u << (n - p)) - 1);
    const __m512d xd = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + p));
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      acc[g] = _mm512_fmadd_pd(_mm512_maskz_loadu_pd(m, rows + g * ld + p), xd, acc[g]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    const __m256d s4 =
        _mm256_add_pd(_mm512_castpd512_pd256(acc[g]), _mm512_extractf64x4_pd(acc[g], 1));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    out[g] = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  }
}

void DotDoubleRows(const float* x, const double* rows, int64_t count, int64_t ld, int64_t n,
                   double* out) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) DotDoubleRowGroup<4>(x, rows + i * ld, ld, n, out + i);
  for (; i < count; ++i) DotDoubleRowGroup<1>(x, rows + i * ld, ld, n, out + i);
}

// acc read and written once per 8 elements for all the rows.
void AddScaledDoubleRows(const double* weights, const double* rows, int64_t count, int64_t ld,
                         int64_t n, double* acc) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m512d a = _mm512_loadu_pd(acc + c);
    for (int64_t i = 0; i < count; ++i) {
      a = _mm512_fmadd_pd(_mm512_set1_pd(weights[i]), _mm512_loadu_pd(rows + i * ld + c), a);
    }
    _mm512_storeu_pd(acc + c, a);
  }
  for (; c < n; ++c) {
    for (int64_t i = 0; i < count; ++i) acc[c] = std::fma(weights[i], rows[i * ld + c], acc[c]);
  }
}

}  // namespace avx512

const IsaKernels kAvx512Kernels = {avx512::GemmBlock,      avx512::DequantizeRowsAnyFormat,
                                   avx512::DotDouble,      avx512::AddScaledDouble,
                                   avx512::DotDoubleRows,  avx512::AddScaledDoubleRows,
                                   avx512::kTaskRowsByDots};

}  // namespace pdspark::kernels::cpu::internal

#pragma GCC pop_options

#else  // not x86-64: never selected (CpuSupports is false)

namespace pdspark::kernels::cpu::internal {
const IsaKernels kAvx512Kernels = {};
}  // namespace pdspark::kernels::cpu::internal

#endif
