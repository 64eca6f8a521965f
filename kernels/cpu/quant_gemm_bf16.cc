// The BF16 dot (quant_gemm.h, GemmPrecision::kBf16Dot) on AVX-512 with BF16: weights decoded
// to fp32 exactly as the exact tiles do (quant_gemm_avx512_vec.h), narrowed to BF16 (exact for
// these values) and multiplied 32 inputs at a time by vdpbf16ps against x already rounded to
// BF16. The tiling of quant_gemm_tiles.h (its Block): 6 rows x 4 weight rows of accumulators; from
// kBf16PanelMinRows rows on, a task narrows its weight rows to BF16 once into scratch.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/quant_gemm_internal.h"

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,f16c,fma")

namespace pdspark::kernels::cpu::internal {
namespace avx512bf16 {

#include "kernels/cpu/quant_gemm_avx512_vec.h"
#include "kernels/cpu/quant_gemm_tiles.h"

// The panels of quant_gemm_tiles.h: by the dot tiles.
template <WeightFormat F>
void Panels(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* scratch) {
  PanelsByDots<F>(p, i0, i1, j0, j1, scratch);
}

static_assert(kBf16DotInputs == 32, "one vdpbf16ps takes 32 inputs");

// From this many rows on, a task narrows its FP8/FP4 weight rows to BF16 once into scratch (the
// narrowing costs about as much as the products of 6 rows: pdspark_gemm_bench --fast measured
// 1.6x over narrowing in registers at 16 rows on FP4, level at 8).
constexpr int64_t kBf16PanelMinRows = 16;

__mmask32 Mask32(int n) { return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1; }

// Inputs [32 q, 32 q + n) of weight row `w` as 32 BF16 values (n <= 32, the rest zero), with
// `scale` = w.ScaleOf(2 q): a view on a 32-column boundary has one scale per 32 inputs.
template <WeightFormat F, bool kPartial>
__m512i LoadBf16Weights(const WeightRow<F>& w, int64_t q, const BlockScale<F>& scale, int n) {
  if constexpr (F == WeightFormat::kBF16) {
    const uint16_t* codes = static_cast<const uint16_t*>(w.codes) + 32 * q;
    return kPartial ? _mm512_maskz_loadu_epi16(Mask32(n), codes) : _mm512_loadu_si512(codes);
  } else if constexpr (kPartial) {
    const __m512 lo = w.template Load<true>(2 * q, scale, n < 16 ? n : 16);
    const __m512 hi = n > 16 ? w.template Load<true>(2 * q + 1, scale, n - 16) : V::Zero();
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  } else {
    const __m512 lo = w.template Load<false>(2 * q, scale, 16);
    const __m512 hi = w.template Load<false>(2 * q + 1, scale, 16);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// y[r, c] for R rows of x (BF16, zero-padded to whole 32-input groups) and C weight rows.
template <WeightFormat F, int R, int C>
void Bf16Tile(const uint16_t* x, int64_t ldx, const WeightRow<F>* w, int64_t k, float* y,
              int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = V::Zero();
  auto multiply = [&](int64_t q, const __m512i* wv) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * ldx + 32 * q));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, reinterpret_cast<__m512bh>(wv[c]));
      }
    }
  };
  const int64_t full = k / 32;
  BlockScale<F> scale[C];
  for (int64_t q = 0; q < full;) {
    // Scale blocks (128 or 32 inputs) hold whole 32-input groups on a 32-column origin.
    const int64_t end = WeightRow<F>::RunEnd(w[0].col0, 2 * q, 2 * full) / 2;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) scale[c] = w[c].ScaleOf(2 * q);
    for (; q < end; ++q) {
      __m512i wv[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) wv[c] = LoadBf16Weights<F, false>(w[c], q, scale[c], 32);
      multiply(q, wv);
    }
  }
  if (const int tail = static_cast<int>(k - 32 * full); tail > 0) {
    __m512i wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      wv[c] = LoadBf16Weights<F, true>(w[c], full, w[c].ScaleOf(2 * full), tail);
    }
    multiply(full, wv);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = V::Reduce(acc[r][c]);
}

// Bf16Tile as Block's kernel (quant_gemm_tiles.h): x in BF16, zero-padded to whole 32-input
// groups.
struct Bf16Tiles {
  using X = uint16_t;
  template <WeightFormat F, int R, int C>
  static void Run(const uint16_t* x, int64_t ldx, const WeightRow<F>* w, int64_t k, float* y,
                  int64_t ldy) {
    Bf16Tile<F, R, C>(x, ldx, w, k, y, ldy);
  }
};

// View rows [j0, j1) of w narrowed to BF16 into out (row stride ldo, whole 32-input groups).
template <WeightFormat F>
void NarrowRows(const WeightMatrix& w, int64_t j0, int64_t j1, uint16_t* out, int64_t ldo) {
  const int64_t full = w.cols / 32;
  const int tail = static_cast<int>(w.cols - 32 * full);
  for (int64_t j = j0; j < j1; ++j) {
    if (j + kPrefetchRowsAhead < w.rows) PrefetchRowCodes<F>(w, j + kPrefetchRowsAhead);
    const WeightRow<F> row(w, j);
    uint16_t* dst = out + (j - j0) * ldo;
    for (int64_t q = 0; q < full; ++q) {
      _mm512_storeu_si512(dst + 32 * q, LoadBf16Weights<F, false>(row, q, row.ScaleOf(2 * q), 32));
    }
    if (tail > 0) {
      _mm512_storeu_si512(dst + 32 * full,
                          LoadBf16Weights<F, true>(row, full, row.ScaleOf(2 * full), tail));
    }
  }
}

template <WeightFormat F>
void Bf16GemmBlockFormat(const uint16_t* x, int64_t ldx, const GemmProblem& p, int64_t i0,
                         int64_t i1, int64_t j0, int64_t j1, float* scratch) {
  if (F == WeightFormat::kBF16 || i1 - i0 < kBf16PanelMinRows) {
    return Block<F, Bf16Tiles>(x, ldx, p.w, i0, i1, j0, j1, p.y, p.ldy);
  }
  // Panels of kPanelCols weight rows narrowed once and swept against every row (scratch holds
  // kPanelCols * w.cols floats, room for as many rows of BF16 padded to 32 inputs).
  const int64_t ldo = (p.w.cols + 31) / 32 * 32;
  uint16_t* panel_codes = reinterpret_cast<uint16_t*>(scratch);
  for (int64_t jp = j0; jp < j1; jp += kPanelCols) {
    const int64_t jq = jp + kPanelCols < j1 ? jp + kPanelCols : j1;
    NarrowRows<F>(p.w, jp, jq, panel_codes, ldo);
    WeightMatrix panel;
    panel.format = WeightFormat::kBF16;
    panel.data = panel_codes;
    panel.row_stride = ldo;
    panel.rows = jq - jp;
    panel.cols = p.w.cols;
    Block<WeightFormat::kBF16, Bf16Tiles>(x, ldx, panel, i0, i1, 0, jq - jp, p.y + jp, p.ldy);
  }
}

}  // namespace avx512bf16

void Bf16DotGemmBlock(const uint16_t* x, int64_t ldx, const GemmProblem& p, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1, float* scratch) {
  using avx512bf16::Bf16GemmBlockFormat;
  switch (p.w.format) {
    case WeightFormat::kBF16:
      return Bf16GemmBlockFormat<WeightFormat::kBF16>(x, ldx, p, i0, i1, j0, j1, scratch);
    case WeightFormat::kFp8E4M3:
      return Bf16GemmBlockFormat<WeightFormat::kFp8E4M3>(x, ldx, p, i0, i1, j0, j1, scratch);
    case WeightFormat::kFp4E2M1:
      return Bf16GemmBlockFormat<WeightFormat::kFp4E2M1>(x, ldx, p, i0, i1, j0, j1, scratch);
    case WeightFormat::kF32:
    case WeightFormat::kMxInt8:
      break;  // never taken (TakesBf16Dot)
  }
}

void RoundRowsToBf16(const float* x, int64_t m, int64_t ldx, int64_t k, uint16_t* out,
                     int64_t ldo) {
  using avx512bf16::V;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * ldx;
    uint16_t* dst = out + i * ldo;
    for (int64_t p = 0; p < ldo; p += 32) {
      const int lo_n = static_cast<int>(k - p < 0 ? 0 : (k - p < 16 ? k - p : 16));
      const int hi_n = static_cast<int>(k - p - 16 < 0 ? 0 : (k - p - 16 < 16 ? k - p - 16 : 16));
      const __m512 lo = lo_n > 0 ? V::LoadF32(row + p, lo_n) : V::Zero();
      const __m512 hi = hi_n > 0 ? V::LoadF32(row + p + 16, hi_n) : V::Zero();
      _mm512_storeu_si512(dst + p, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

}  // namespace pdspark::kernels::cpu::internal

#pragma GCC pop_options

#else  // not x86-64: never called (CpuSupportsBf16Dot is false)

namespace pdspark::kernels::cpu::internal {
void Bf16DotGemmBlock(const uint16_t*, int64_t, const GemmProblem&, int64_t, int64_t, int64_t,
                      int64_t, float*) {}
void RoundRowsToBf16(const float*, int64_t, int64_t, int64_t, uint16_t*, int64_t) {}
}  // namespace pdspark::kernels::cpu::internal

#endif
