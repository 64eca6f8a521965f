// The int8 dot (quant_gemm.h, GemmPrecision::kInt8Dot) on AVX2: 32 inputs at a time, x's codes
// against the weights' as integers (vpmaddubsw on |w| and x with w's sign, then vpmaddwd into
// eight int32 lanes: exact, no product pair reaches 2^15), each group's lane sums converted to
// fp32 and added into eight fp32 lanes times the group's two scales. Tiles of up to 4 rows x 2
// weight rows; the codes of the weight rows kPrefetchRowsAhead on are requested as they go
// (on a Zen 3, 1-row products read 10-12 GB/s with that against 7-8 without).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_gemm_internal.h"

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace pdspark::kernels::cpu::internal {
namespace {

constexpr int kGroup = kInt8DotInputs;
constexpr int kTileRows = 4;
constexpr int kTileCols = 2;
constexpr int64_t kPrefetchRowsAhead = 4;

// 2 x each E2M1 value (an integer) by code: the FP4 codes as int8 codes.
__m256i Fp4Doubled() {
  return _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

// One weight row's 32-input groups as int8 codes and each group's multiplier.
template <WeightFormat F>
struct Int8WeightRow {
  const uint8_t* codes = nullptr;   // at the view's column 0
  const uint8_t* scales = nullptr;  // the row's scales at the view's first group
  int64_t cols = 0;
  int64_t prefetch_stride = 0;  // bytes from this row's codes to those kPrefetchRowsAhead on

  Int8WeightRow(const WeightMatrix& w, int64_t j) : cols(w.cols) {
    const int64_t row = w.row0 + j, first = row * w.row_stride + w.col0;
    codes = static_cast<const uint8_t*>(w.data) + (F == WeightFormat::kFp4E2M1 ? first / 2 : first);
    scales = w.scales + row * w.scale_stride + w.col0 / kGroup;
    const int64_t ahead = j + kPrefetchRowsAhead < w.rows ? kPrefetchRowsAhead : 0;
    prefetch_stride = ahead * w.row_stride / (F == WeightFormat::kFp4E2M1 ? 2 : 1);
  }

  // MXINT8 codes are worth 2^-6 of the scale; FP4 codes doubled, half of it.
  float Multiplier(int64_t g) const {
    return kE8M0Values[scales[g]] * (F == WeightFormat::kFp4E2M1 ? 0.5f : kMxInt8CodeUnit);
  }

  __m256i Codes(int64_t g) const {
    constexpr int kBytes = F == WeightFormat::kFp4E2M1 ? kGroup / 2 : kGroup;
    const uint8_t* p = codes + g * kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(p + prefetch_stride), _MM_HINT_T0);
    const int64_t n = cols - g * kGroup;
    alignas(32) uint8_t buffer[kBytes];
    if (n < kGroup) {  // a row's last, partial group: the inputs past the row are zero
      std::memset(buffer, 0, kBytes);
      std::memcpy(buffer, p, F == WeightFormat::kFp4E2M1 ? (n + 1) / 2 : n);
      p = buffer;
    }
    if constexpr (F == WeightFormat::kFp4E2M1) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i low4 = _mm_set1_epi8(0x0F);
      const __m128i lo = _mm_and_si128(bytes, low4);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
      const __m256i nibbles =
          _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
      return _mm256_shuffle_epi8(Fp4Doubled(), nibbles);
    } else {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }
  }
};

// The eight int32 lane sums of x . w over a group: lane l holds inputs 4l .. 4l+3.
__m256 GroupDot(__m256i w_abs, __m256i w, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// ((l, l+4), (l, l+2), (l, l+1)).
float Reduce(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <WeightFormat F, int R, int C>
void Tile(const Int8Rows& x, int64_t i, const Int8WeightRow<F>* w, int64_t groups, float* y,
          int64_t ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i wv[C], w_abs[C];
    __m256 multiplier[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      wv[c] = w[c].Codes(g);
      w_abs[c] = _mm256_abs_epi8(wv[c]);
      multiplier[c] = _mm256_set1_ps(w[c].Multiplier(g));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x.codes + (i + r) * x.ld + g * kGroup));
      const __m256 x_scale = _mm256_broadcast_ss(x.scales + (i + r) * x.groups + g);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm256_fmadd_ps(GroupDot(w_abs[c], wv[c], xv),
                                    _mm256_mul_ps(x_scale, multiplier[c]), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = Reduce(acc[r][c]);
}

template <WeightFormat F, int C, int R = kTileRows>
void TileRows(int r, const Int8Rows& x, int64_t i, const Int8WeightRow<F>* w, int64_t groups,
              float* y, int64_t ldy) {
  if constexpr (R >= 1) {
    if (r == R) return Tile<F, R, C>(x, i, w, groups, y, ldy);
    return TileRows<F, C, R - 1>(r, x, i, w, groups, y, ldy);
  }
}

template <WeightFormat F>
void Block(const Int8Rows& x, const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0,
           int64_t j1) {
  const int64_t groups = (p.w.cols + kGroup - 1) / kGroup;
  for (int64_t j = j0; j < j1;) {
    const int cols = j1 - j >= kTileCols ? kTileCols : 1;
    const Int8WeightRow<F> rows[kTileCols] = {Int8WeightRow<F>(p.w, j),
                                              Int8WeightRow<F>(p.w, j + cols - 1)};
    for (int64_t i = i0; i < i1; i += kTileRows) {
      const int r = static_cast<int>(i1 - i < kTileRows ? i1 - i : kTileRows);
      float* y = p.y + i * p.ldy + j;
      if (cols == kTileCols) {
        TileRows<F, kTileCols>(r, x, i, rows, groups, y, p.ldy);
      } else {
        TileRows<F, 1>(r, x, i, rows, groups, y, p.ldy);
      }
    }
    j += cols;
  }
}

}  // namespace

void Int8DotGemmBlock(const Int8Rows& x, const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0,
                      int64_t j1) {
  if (p.w.format == WeightFormat::kFp4E2M1)
    return Block<WeightFormat::kFp4E2M1>(x, p, i0, i1, j0, j1);
  Block<WeightFormat::kMxInt8>(x, p, i0, i1, j0, j1);  // TakesInt8Dot admits no other format
}

void QuantizeRowsToInt8(const float* x, int64_t m, int64_t ldx, int64_t k, const Int8Rows& out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < out.groups; ++g) {
      const int64_t p = g * kGroup, n = k - p < kGroup ? k - p : kGroup;
      float values[kGroup] = {};
      std::memcpy(values, x + i * ldx + p, n * sizeof(float));
      __m256 v[4], amax = _mm256_setzero_ps();
      const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
      for (int q = 0; q < 4; ++q) {
        v[q] = _mm256_loadu_ps(values + 8 * q);
        amax = _mm256_max_ps(amax, _mm256_and_ps(v[q], abs_mask));
      }
      float lanes[8];
      _mm256_storeu_ps(lanes, amax);
      float group_max = 0;
      for (float l : lanes) group_max = group_max > l ? group_max : l;
      const float scale = group_max / 127.0f;
      const __m256 inverse = _mm256_set1_ps(group_max > 0 ? 127.0f / group_max : 0.0f);
      __m256i q32[4];
      for (int q = 0; q < 4; ++q) q32[q] = _mm256_cvtps_epi32(_mm256_mul_ps(v[q], inverse));
      // Pack to 16 then 8 bits (saturating: |code| <= 127 already) and undo the packs' lane
      // interleave.
      const __m256i q16 = _mm256_packs_epi32(q32[0], q32[1]),
                    q16b = _mm256_packs_epi32(q32[2], q32[3]);
      const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, q16b),
                                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.codes + i * out.ld + p), q8);
      out.scales[i * out.groups + g] = scale;
    }
  }
}

}  // namespace pdspark::kernels::cpu::internal

#pragma GCC pop_options

#else  // not x86-64: never called (CpuSupportsInt8Dot is false)

namespace pdspark::kernels::cpu::internal {
void Int8DotGemmBlock(const Int8Rows&, const GemmProblem&, int64_t, int64_t, int64_t, int64_t) {}
void QuantizeRowsToInt8(const float*, int64_t, int64_t, int64_t, const Int8Rows&) {}
}  // namespace pdspark::kernels::cpu::internal

#endif
