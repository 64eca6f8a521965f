// The int8 dot (quant_gemm.h, GemmPrecision::kInt8Dot) on AVX2: 32 inputs at a time, x's codes
// against the weights' as integers (vpmaddubsw on |w| and x with w's sign, then vpmaddwd into
// eight int32 lanes: exact, no product pair reaches 2^15), each group's lane sums converted to
// fp32 and added into eight fp32 lanes times the group's two scales. Tiles of up to 4 rows x 2
// weight rows. A task of one tile of rows decodes the weights in registers as it goes, and
// requests the codes of the weight rows kPrefetchRowsAhead on (on a Zen 3, 1-row products read
// 10-12 GB/s with that against 7-8 without); a task of more rows decodes each weight row once
// into a buffer and sweeps it against all its tiles. Both give the same bits.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

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

// Bytes of a group's codes, and what a code is worth in units of the group's scale: MXINT8
// codes 2^-6 of it; FP4 codes doubled (to integers), half of it.
template <WeightFormat F>
constexpr int CodeBytes() {
  return F == WeightFormat::kFp4E2M1 ? kGroup / 2 : kGroup;
}
template <WeightFormat F>
constexpr float CodeUnit() {
  return F == WeightFormat::kFp4E2M1 ? 0.5f : kMxInt8CodeUnit;
}

// 2 x each E2M1 value (an integer) by code: the FP4 codes as int8 codes.
__m256i Fp4Doubled() {
  return _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

// A group's 32 int8 codes from its bytes in the checkpoint.
template <WeightFormat F>
__m256i LoadCodes(const uint8_t* p) {
  if constexpr (F == WeightFormat::kFp4E2M1) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, low4);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
    const __m256i nibbles = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    return _mm256_shuffle_epi8(Fp4Doubled(), nibbles);
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
}

// A weight row read where it lies, decoded in registers group by group: what a task of one tile
// of rows multiplies (a decoded copy would be read once; a 1-row product runs at the pace of its
// loads, and a pass to decode first cost it up to a third).
template <WeightFormat F>
struct InPlaceRow {
  const uint8_t* codes = nullptr;   // at the view's column 0
  const uint8_t* scales = nullptr;  // the row's scales at the view's first group
  int64_t cols = 0;
  int64_t prefetch_stride = 0;  // bytes from this row's codes to those kPrefetchRowsAhead on

  InPlaceRow() = default;
  InPlaceRow(const WeightMatrix& w, int64_t j) : cols(w.cols) {
    const int64_t row = w.row0 + j, first = row * w.row_stride + w.col0;
    codes = static_cast<const uint8_t*>(w.data) + (F == WeightFormat::kFp4E2M1 ? first / 2 : first);
    scales = w.scales + row * w.scale_stride + w.col0 / kGroup;
    const int64_t ahead = j + kPrefetchRowsAhead < w.rows ? kPrefetchRowsAhead : 0;
    prefetch_stride = ahead * w.row_stride / (F == WeightFormat::kFp4E2M1 ? 2 : 1);
  }

  float Multiplier(int64_t g) const { return kE8M0Values[scales[g]] * CodeUnit<F>(); }

  __m256i Codes(int64_t g) const {
    const uint8_t* p = codes + g * CodeBytes<F>();
    _mm_prefetch(reinterpret_cast<const char*>(p + prefetch_stride), _MM_HINT_T0);
    const int64_t n = cols - g * kGroup;
    if (n >= kGroup) return LoadCodes<F>(p);
    // A row's last, partial group: the inputs past the row are zero.
    alignas(32) uint8_t buffer[CodeBytes<F>()] = {};
    std::memcpy(buffer, p, F == WeightFormat::kFp4E2M1 ? (n + 1) / 2 : n);
    return LoadCodes<F>(buffer);
  }
};

// A weight row decoded into a thread's buffer: its int8 codes group after group and each
// group's multiplier. A task of more rows than one tile decodes each weight row once and sweeps
// it against all its tiles: decoding inside the tile's loop repeated it for every 4 rows and left
// the tile too few registers (1.2-1.8x at 256 rows on a Zen 3, docs/perf.md).
struct DecodedRow {
  const int8_t* codes;
  const float* multipliers;

  __m256i Codes(int64_t g) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + g * kGroup));
  }
  float Multiplier(int64_t g) const { return multipliers[g]; }
};

// Room for kTileCols decoded rows (grown to the widest row seen, then kept): one per thread.
struct DecodeBuffer {
  std::vector<int8_t> codes;
  std::vector<float> multipliers;

  // Decodes `row` into slot c.
  template <WeightFormat F>
  DecodedRow Decode(int c, const InPlaceRow<F>& row, int64_t groups) {
    if (static_cast<int64_t>(multipliers.size()) < kTileCols * groups) {
      codes.resize(kTileCols * groups * kGroup);
      multipliers.resize(kTileCols * groups);
    }
    int8_t* row_codes = codes.data() + c * groups * kGroup;
    float* row_multipliers = multipliers.data() + c * groups;
    for (int64_t g = 0; g < groups; ++g) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row_codes + g * kGroup), row.Codes(g));
      row_multipliers[g] = row.Multiplier(g);
    }
    return {row_codes, row_multipliers};
  }
};
thread_local DecodeBuffer decode_buffer;

// ((l, l+4), (l, l+2), (l, l+1)).
float Reduce(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// Rows i .. i+R-1 of x against C weight rows. Per group and pair: x's codes with the weight's
// signs, vpmaddubsw against |w| and vpmaddwd into eight int32 lane sums (exact: no product pair
// reaches 2^15), converted to fp32 and added into eight lanes times x's scale times the weight's
// multiplier.
template <class WeightRow, int R, int C>
void Tile(const Int8Rows& x, int64_t i, const WeightRow* w, int64_t groups, float* y, int64_t ldy) {
  const int8_t* x_codes[R];
  const float* x_scales[R];
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    x_codes[r] = x.codes + (i + r) * x.ld;
    x_scales[r] = x.scales + (i + r) * x.groups;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < groups; ++g) {
    __m256i wv[C], w_abs[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      wv[c] = w[c].Codes(g);
      w_abs[c] = _mm256_abs_epi8(wv[c]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_codes[r] + g * kGroup));
      const __m256 x_scale = _mm256_broadcast_ss(x_scales[r] + g);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i pairs = _mm256_maddubs_epi16(w_abs[c], _mm256_sign_epi8(xv, wv[c]));
        const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        const __m256 scale = _mm256_mul_ps(x_scale, _mm256_set1_ps(w[c].Multiplier(g)));
        acc[r][c] = _mm256_fmadd_ps(sums, scale, acc[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = Reduce(acc[r][c]);
}

// Rows [i0, i1) against C weight rows, in tiles of up to kTileRows.
template <class WeightRow, int C>
void SweepRows(const Int8Rows& x, int64_t i0, int64_t i1, const WeightRow* w, int64_t groups,
               float* y, int64_t ldy) {
  for (int64_t i = i0; i < i1; i += kTileRows) {
    float* out = y + i * ldy;
    switch (i1 - i < kTileRows ? i1 - i : kTileRows) {
      case 4:
        Tile<WeightRow, 4, C>(x, i, w, groups, out, ldy);
        break;
      case 3:
        Tile<WeightRow, 3, C>(x, i, w, groups, out, ldy);
        break;
      case 2:
        Tile<WeightRow, 2, C>(x, i, w, groups, out, ldy);
        break;
      default:
        Tile<WeightRow, 1, C>(x, i, w, groups, out, ldy);
    }
  }
}

// Weight rows j .. j+C-1 against rows [i0, i1): in place for one tile of rows, else decoded.
template <WeightFormat F, int C>
void Columns(const Int8Rows& x, const GemmProblem& p, int64_t i0, int64_t i1, int64_t j,
             int64_t groups) {
  InPlaceRow<F> in_place[C];
  for (int c = 0; c < C; ++c) in_place[c] = InPlaceRow<F>(p.w, j + c);
  float* y = p.y + j;
  if (i1 - i0 <= kTileRows)
    return SweepRows<InPlaceRow<F>, C>(x, i0, i1, in_place, groups, y, p.ldy);
  DecodedRow decoded[C];
  for (int c = 0; c < C; ++c) decoded[c] = decode_buffer.Decode(c, in_place[c], groups);
  SweepRows<DecodedRow, C>(x, i0, i1, decoded, groups, y, p.ldy);
}

template <WeightFormat F>
void Block(const Int8Rows& x, const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0,
           int64_t j1) {
  const int64_t groups = (p.w.cols + kGroup - 1) / kGroup;
  int64_t j = j0;
  for (; j + kTileCols <= j1; j += kTileCols) Columns<F, kTileCols>(x, p, i0, i1, j, groups);
  if (j < j1) Columns<F, 1>(x, p, i0, i1, j, groups);
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
