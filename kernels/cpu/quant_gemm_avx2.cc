// The GEMM tiles on AVX2 with FMA and F16C: two __m256 (lanes 0-7 and 8-15) hold the 16 lanes
// of the canonical dot, so the first step of the lane-sum tree is lo + hi and the results equal
// the AVX-512 path's bit for bit. FP8 and BF16 are widened as there; FP4 magnitudes through an
// 8-entry permute with the sign bit moved into place.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_gemm_internal.h"

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace pdspark::kernels::cpu::internal {
namespace avx2 {

struct V {
  struct Vec {
    __m256 lo, hi;
  };
  // 16 registers. A 6 x 1 tile takes 12 for accumulators and 2 for the weights, whose
  // decode is shared by 6 rows (x comes from memory in the FMAs): 1.3-1.9x a 2 x 2 tile's
  // GFLOP/s at 4 to 16 rows on FP8 and FP4 (pdspark_gemm_bench on a Zen 3). One or two rows
  // keep the 2 x 2 tile: one column gives them too few accumulator chains.
  static constexpr int kTileRows = 6;
  static constexpr int kTileCols = 1;
  static constexpr int kFewRows = 2;
  static constexpr int kFewRowsTileCols = 2;
  // LoadFp8 yields value / 256: a block's scale code becomes 256 * scale.
  static constexpr const std::array<float, 256>& kFp8Multipliers = kE8M0Times256;

  static Vec Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec Fma(Vec x, Vec w, Vec acc) {
    return {_mm256_fmadd_ps(x.lo, w.lo, acc.lo), _mm256_fmadd_ps(x.hi, w.hi, acc.hi)};
  }
  static Vec Mul(Vec v, float s) {
    const __m256 m = _mm256_set1_ps(s);
    return {_mm256_mul_ps(v.lo, m), _mm256_mul_ps(v.hi, m)};
  }

  // A partial load reads the first n elements into a zeroed buffer: only a row's last block.
  template <class T>
  static const T* Padded(const T* p, int n, T (&buffer)[16]) {
    std::memset(buffer, 0, sizeof(buffer));
    std::memcpy(buffer, p, n * sizeof(T));
    return buffer;
  }

  static Vec LoadF32(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Vec LoadF32(const float* p, int n) {
    float buffer[16];
    return LoadF32(Padded(p, n, buffer));
  }

  static __m256 WidenBf16(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static Vec LoadBf16(const uint16_t* p) {
    return {WidenBf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            WidenBf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static Vec LoadBf16(const uint16_t* p, int n) {
    uint16_t buffer[16];
    return LoadBf16(Padded(p, n, buffer));
  }

  // As the AVX-512 path: E4M3 bits shifted into FP16 give value / 256.
  static Vec LoadFp8(const uint8_t* p, float multiplier) {
    const __m256i bits = _mm256_and_si256(
        _mm256_slli_epi16(
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 7),
        _mm256_set1_epi16(static_cast<short>(0xBF80)));
    const Vec v = {_mm256_cvtph_ps(_mm256_castsi256_si128(bits)),
                   _mm256_cvtph_ps(_mm256_extracti128_si256(bits, 1))};
    return Mul(v, multiplier);
  }
  static Vec LoadFp8(const uint8_t* p, float multiplier, int n) {
    uint8_t buffer[16];
    return LoadFp8(Padded(p, n, buffer), multiplier);
  }

  // The 8 E2M1 magnitudes times a block's scale; the sign is applied after the lookup
  // (-(v * s) is exactly (-v) * s).
  using Fp4Table = __m256;
  static Fp4Table MakeFp4Table(float scale) {
    return _mm256_mul_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f),
                         _mm256_set1_ps(scale));
  }
  // Eight codes -> their values: magnitude by permute, sign bit (code bit 3) moved to bit 31.
  static __m256 Fp4Values(__m128i codes8, Fp4Table magnitudes) {
    const __m256i codes = _mm256_cvtepu8_epi32(codes8);
    const __m256 magnitude = _mm256_permutevar8x32_ps(magnitudes, codes);  // uses bits 0-2
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(magnitude, _mm256_castsi256_ps(sign));
  }
  static Vec LoadFp4(const uint8_t* p, Fp4Table table) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(bytes, low4),
                                            _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    return {Fp4Values(codes, table), Fp4Values(_mm_srli_si128(codes, 8), table)};
  }
  static Vec LoadFp4(const uint8_t* p, Fp4Table table, int n) {
    uint8_t buffer[16];
    return LoadFp4(Padded(p, (n + 1) / 2, buffer), table);
  }

  static void Store(float* p, Vec v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static void Store(float* p, Vec v, int n) {
    float buffer[16];
    Store(buffer, v);
    std::memcpy(p, buffer, n * sizeof(float));
  }

  // ((l, l+8), (l, l+4), (l, l+2), (l, l+1)): lanes l and l+8 are lo[l] and hi[l].
  static float Reduce(Vec v) {
    const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

#include "kernels/cpu/quant_gemm_tiles.h"

// The canonical double dot (see quant_gemm_avx512.cc): lanes 0-3 and 4-7 in two registers.
double DotDouble(const float* a, const float* b, int64_t n) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    lo = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + p)), _mm256_cvtps_pd(_mm_loadu_ps(b + p)),
                         lo);
    hi = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + p + 4)),
                         _mm256_cvtps_pd(_mm_loadu_ps(b + p + 4)), hi);
  }
  alignas(32) double lanes[8];
  _mm256_store_pd(lanes, lo);
  _mm256_store_pd(lanes + 4, hi);
  for (int l = 0; p + l < n; ++l) {
    lanes[l] += static_cast<double>(a[p + l]) * b[p + l];
  }
  const double s0 = lanes[0] + lanes[4], s1 = lanes[1] + lanes[5], s2 = lanes[2] + lanes[6],
               s3 = lanes[3] + lanes[7];
  return (s0 + s2) + (s1 + s3);
}

void AddScaledDouble(double weight, const float* x, int64_t n, double* acc) {
  const __m256d w = _mm256_set1_pd(weight);
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    _mm256_storeu_pd(acc + c, _mm256_fmadd_pd(w, _mm256_cvtps_pd(_mm_loadu_ps(x + c)),
                                              _mm256_loadu_pd(acc + c)));
  }
  for (; c < n; ++c) acc[c] = std::fma(weight, static_cast<double>(x[c]), acc[c]);
}

}  // namespace avx2

const IsaKernels kAvx2Kernels = {avx2::GemmBlock, avx2::DequantizeRowsAnyFormat, avx2::DotDouble,
                                 avx2::AddScaledDouble};

}  // namespace pdspark::kernels::cpu::internal

#pragma GCC pop_options

#else  // not x86-64: never selected (CpuSupports is false)

namespace pdspark::kernels::cpu::internal {
const IsaKernels kAvx2Kernels = {};
}  // namespace pdspark::kernels::cpu::internal

#endif
