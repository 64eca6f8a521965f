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

}  // namespace avx512

const IsaKernels kAvx512Kernels = {avx512::GemmBlock, avx512::DequantizeRowsAnyFormat,
                                   avx512::DotDouble, avx512::AddScaledDouble,
                                   avx512::kTaskRowsByDots};

}  // namespace pdspark::kernels::cpu::internal

#pragma GCC pop_options

#else  // not x86-64: never selected (CpuSupports is false)

namespace pdspark::kernels::cpu::internal {
const IsaKernels kAvx512Kernels = {};
}  // namespace pdspark::kernels::cpu::internal

#endif
