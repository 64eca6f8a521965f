// The GEMM tiles on AVX2 with FMA and F16C: two __m256 (lanes 0-7 and 8-15) hold the 16 lanes
// of the canonical dot, so the first step of the lane-sum tree is lo + hi and the results equal
// the AVX-512 path's bit for bit. FP8 and BF16 are widened as there; FP4 codes become FP16 through
// a 16-entry byte lookup.
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
  // The operations of quant_gemm_phases.h: a Part is 8 lanes.
  using Part = __m256;
  static constexpr int kParts = 2;
  static Part ZeroPart() { return _mm256_setzero_ps(); }
  static Part LoadPart(const float* p) { return _mm256_loadu_ps(p); }
  static Part BroadcastPart(const float* p) { return _mm256_broadcast_ss(p); }
  static Part FmaPart(Part x, Part w, Part acc) { return _mm256_fmadd_ps(x, w, acc); }
  static Part AddPart(Part a, Part b) { return _mm256_add_ps(a, b); }
  static Part& PartOf(Vec& v, int part) { return part == 0 ? v.lo : v.hi; }
  // Eight registers as an 8 x 8 matrix, transposed: pairs interleaved, then quads, then halves.
  static void Transpose8(__m256 (&r)[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
      s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
      s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
      r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
  }
  // The 16 x 16 transpose from four 8 x 8 ones: the off-diagonal quarters change places.
  static void Transpose16(Vec (&m)[16]) {
    __m256 q[4][8];  // lo of m[0..7], hi of m[0..7], lo of m[8..15], hi of m[8..15]
    for (int i = 0; i < 8; ++i) {
      q[0][i] = m[i].lo, q[1][i] = m[i].hi, q[2][i] = m[i + 8].lo, q[3][i] = m[i + 8].hi;
    }
    for (auto& quarter : q) Transpose8(quarter);
    for (int i = 0; i < 8; ++i) {
      m[i] = {q[0][i], q[2][i]};
      m[i + 8] = {q[1][i], q[3][i]};
    }
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

  static __m256 WidenInt8(__m128i codes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)); }
  static Vec LoadInt8(const int8_t* p, float multiplier) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return Mul({WidenInt8(codes), WidenInt8(_mm_unpackhi_epi64(codes, codes))}, multiplier);
  }
  static Vec LoadInt8(const int8_t* p, float multiplier, int n) {
    int8_t buffer[16];
    return LoadInt8(Padded(p, n, buffer), multiplier);
  }

  // A block's scale, broadcast: a code's FP16 value (exact) times it is the weight.
  using Fp4Table = __m256;
  static Fp4Table MakeFp4Table(float scale) { return _mm256_set1_ps(scale); }
  // Sixteen codes, in order, from 8 bytes (low nibble first).
  static __m128i Fp4Codes(const uint8_t* p) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(bytes, low4),
                             _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
  }
  // Each E2M1 value's FP16 bits have a zero low byte, so one byte lookup per code gives them:
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is -0, as the sign bit makes it).
  // Fewer operations than a permute of the magnitudes and a sign moved into place.
  static Vec LoadFp4(const uint8_t* p, Fp4Table scale) {
    const __m128i kFp16HighBytes =
        _mm_setr_epi8(0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, static_cast<char>(0x80),
                      static_cast<char>(0xB8), static_cast<char>(0xBC), static_cast<char>(0xBE),
                      static_cast<char>(0xC0), static_cast<char>(0xC2), static_cast<char>(0xC4),
                      static_cast<char>(0xC6));
    const __m128i high = _mm_shuffle_epi8(kFp16HighBytes, Fp4Codes(p));
    const __m128i zero = _mm_setzero_si128();
    return {_mm256_mul_ps(_mm256_cvtph_ps(_mm_unpacklo_epi8(zero, high)), scale),
            _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpackhi_epi8(zero, high)), scale)};
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
// After the tiles, whose WeightRow it uses.
#include "kernels/cpu/quant_gemm_phases.h"

// The panels of quant_gemm_tiles.h: by phases, 1.3-1.8x the dot tiles' GFLOP/s at 64 rows and
// 1.7-2.4x at 256 (whose 6 x 1 tile loads 14 vectors for 12 FMAs: 30 % of a Zen 3's FMA peak;
// pdspark_gemm_bench). Fp32 weights keep the dot tiles: the model's are a few columns over
// long inputs, where packing x for phases costs more than it saves.
template <WeightFormat F>
void Panels(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* scratch) {
  if constexpr (F == WeightFormat::kF32) {
    PanelsByDots<F>(p, i0, i1, j0, j1, scratch);
  } else {
    GemmByPhases<F>(p, i0, i1, j0, j1, scratch);
  }
}

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

// Rows [i, i + G) of DotDoubleRows: x widened once per 8 inputs for G rows.
template <int G>
void DotDoubleRowGroup(const float* x, const double* rows, int64_t ld, int64_t n, double* out) {
  __m256d lo[G], hi[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) lo[g] = hi[g] = _mm256_setzero_pd();
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    const __m256d xlo = _mm256_cvtps_pd(_mm_loadu_ps(x + p));
    const __m256d xhi = _mm256_cvtps_pd(_mm_loadu_ps(x + p + 4));
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      lo[g] = _mm256_fmadd_pd(_mm256_loadu_pd(rows + g * ld + p), xlo, lo[g]);
      hi[g] = _mm256_fmadd_pd(_mm256_loadu_pd(rows + g * ld + p + 4), xhi, hi[g]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    alignas(32) double lanes[8];
    _mm256_store_pd(lanes, lo[g]);
    _mm256_store_pd(lanes + 4, hi[g]);
    for (int l = 0; p + l < n; ++l) lanes[l] += rows[g * ld + p + l] * x[p + l];
    const double s0 = lanes[0] + lanes[4], s1 = lanes[1] + lanes[5], s2 = lanes[2] + lanes[6],
                 s3 = lanes[3] + lanes[7];
    out[g] = (s0 + s2) + (s1 + s3);
  }
}

void DotDoubleRows(const float* x, const double* rows, int64_t count, int64_t ld, int64_t n,
                   double* out) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) DotDoubleRowGroup<4>(x, rows + i * ld, ld, n, out + i);
  for (; i < count; ++i) DotDoubleRowGroup<1>(x, rows + i * ld, ld, n, out + i);
}

// acc read and written once per 4 elements for all the rows; 16 elements at a time, so that
// four chains of FMAs (each element's runs in row order) overlap.
void AddScaledDoubleRows(const double* weights, const double* rows, int64_t count, int64_t ld,
                         int64_t n, double* acc) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    __m256d a[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) a[u] = _mm256_loadu_pd(acc + c + 4 * u);
    for (int64_t i = 0; i < count; ++i) {
      const __m256d w = _mm256_broadcast_sd(weights + i);
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        a[u] = _mm256_fmadd_pd(w, _mm256_loadu_pd(rows + i * ld + c + 4 * u), a[u]);
      }
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) _mm256_storeu_pd(acc + c + 4 * u, a[u]);
  }
  for (; c + 4 <= n; c += 4) {
    __m256d a = _mm256_loadu_pd(acc + c);
    for (int64_t i = 0; i < count; ++i) {
      a = _mm256_fmadd_pd(_mm256_set1_pd(weights[i]), _mm256_loadu_pd(rows + i * ld + c), a);
    }
    _mm256_storeu_pd(acc + c, a);
  }
  for (; c < n; ++c) {
    for (int64_t i = 0; i < count; ++i) acc[c] = std::fma(weights[i], rows[i * ld + c], acc[c]);
  }
}

}  // namespace avx2

const IsaKernels kAvx2Kernels = {
    avx2::GemmBlock,     avx2::DequantizeRowsAnyFormat, avx2::DotDouble,      avx2::AddScaledDouble,
    avx2::DotDoubleRows, avx2::AddScaledDoubleRows,     avx2::kPhaseSliceRows};

}  // namespace pdspark::kernels::cpu::internal

#pragma GCC pop_options

#else  // not x86-64: never selected (CpuSupports is false)

namespace pdspark::kernels::cpu::internal {
const IsaKernels kAvx2Kernels = {};
}  // namespace pdspark::kernels::cpu::internal

#endif
