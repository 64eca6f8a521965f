// The GEMM tiles, written once over a 16-lane vector type V that each instruction-set file
// provides (quant_gemm_avx512.cc: one __m512; quant_gemm_avx2.cc: two __m256; portable: 16
// floats). Every V computes the same "canonical dot" (quant_gemm.h), so the files agree to the
// bit. Included by those files after their `#pragma GCC target`, inside their own namespace;
// it includes nothing itself so that no standard-library code is compiled for that target
// (the including file includes <type_traits> first).
//
// V provides:
//   using Vec; kTileRows, kTileCols, kFewRows, kFewRowsTileCols (Block); Zero(); Fma(x, w, acc);
//   Reduce(v) (the canonical tree); Store(p, v[, n]); for 16 values (n < 16: the first n, the rest
//   zero) LoadF32(p[, n]), LoadBf16(p[, n]), LoadFp8(p, multiplier[, n]), LoadFp4(p, table[, n])
//   and LoadInt8(p, multiplier[, n]) (MXINT8 codes times code unit x scale); kFp8Multipliers, what
//   a block's E8M0 scale code becomes in LoadFp8 (kE8M0Values, or kE8M0Times256 where the vector
//   decode yields value / 256: the product is the same correctly rounded value); and Fp4Table /
//   MakeFp4Table(scale), what LoadFp4 takes of a block's scale (AVX-512: the 16 E2M1 values times
//   it; AVX2 and portable: the scale itself).

// The 16-wide input blocks of a view cross a scale block every this many inputs.
template <WeightFormat F>
constexpr int64_t kScaleBlock = F == WeightFormat::kFp8E4M3   ? kFp8ScaleBlock
                                : F == WeightFormat::kFp4E2M1 ? kFp4ScaleBlock
                                : F == WeightFormat::kMxInt8  ? kMxInt8ScaleBlock
                                                              : 0;

// What a block's scale becomes for the loads. (Specialisations rather than std::conditional_t:
// a vector type such as __m256 as a template argument loses its alignment attribute, and GCC
// warns.)
struct NoScale {};
template <WeightFormat F>
struct BlockScaleOf {
  using Type = NoScale;
};
template <>
struct BlockScaleOf<WeightFormat::kFp8E4M3> {
  using Type = float;
};
template <>
struct BlockScaleOf<WeightFormat::kFp4E2M1> {
  using Type = V::Fp4Table;
};
template <>
struct BlockScaleOf<WeightFormat::kMxInt8> {
  using Type = float;
};
template <WeightFormat F>
using BlockScale = typename BlockScaleOf<F>::Type;

// One weight row of a view: loads its 16-wide input blocks dequantised.
template <WeightFormat F>
struct WeightRow {
  const void* codes = nullptr;      // the row's element at the view's column 0
  const uint8_t* scales = nullptr;  // the row's scale row (quantised formats)
  uint64_t col0 = 0;                // the view's column origin in the tensor

  WeightRow() = default;
  WeightRow(const WeightMatrix& w, int64_t j) : col0(static_cast<uint64_t>(w.col0)) {
    const int64_t row = w.row0 + j;
    const int64_t first = row * w.row_stride + w.col0;
    switch (F) {
      case WeightFormat::kF32:
        codes = static_cast<const float*>(w.data) + first;
        break;
      case WeightFormat::kBF16:
        codes = static_cast<const uint16_t*>(w.data) + first;
        break;
      case WeightFormat::kFp8E4M3:
        codes = static_cast<const uint8_t*>(w.data) + first;
        scales = w.scales + (row / kFp8ScaleBlock) * w.scale_stride;
        break;
      case WeightFormat::kFp4E2M1:
        codes = static_cast<const uint8_t*>(w.data) + first / 2;
        scales = w.scales + row * w.scale_stride;
        break;
      case WeightFormat::kMxInt8:
        codes = static_cast<const int8_t*>(w.data) + first;
        scales = w.scales + row * w.scale_stride;
        break;
    }
  }

  // The end of the run of blocks from block b that share b's scale (at most `full`).
  static int64_t RunEnd(uint64_t col0, int64_t b, int64_t full) {
    if constexpr (kScaleBlock<F> == 0) {
      return full;
    } else {
      const uint64_t next = (col0 + 16 * b) / kScaleBlock<F> * kScaleBlock<F> + kScaleBlock<F>;
      const int64_t end = static_cast<int64_t>((next - col0) / 16);
      return end < full ? end : full;
    }
  }

  BlockScale<F> ScaleOf(int64_t b) const {
    if constexpr (F == WeightFormat::kFp8E4M3) {
      return V::kFp8Multipliers[scales[(col0 + 16 * b) / kFp8ScaleBlock]];
    } else if constexpr (F == WeightFormat::kFp4E2M1) {
      return V::MakeFp4Table(kE8M0Values[scales[(col0 + 16 * b) / kFp4ScaleBlock]]);
    } else if constexpr (F == WeightFormat::kMxInt8) {
      return kE8M0Values[scales[(col0 + 16 * b) / kMxInt8ScaleBlock]] * kMxInt8CodeUnit;
    } else {
      return NoScale{};
    }
  }

  // Inputs [16 b, 16 b + n) of the view, n <= 16, with `scale` = ScaleOf(b).
  template <bool kPartial>
  typename V::Vec Load(int64_t b, const BlockScale<F>& scale, int n) const {
    const int64_t p = 16 * b;
    if constexpr (F == WeightFormat::kF32) {
      const float* c = static_cast<const float*>(codes) + p;
      return kPartial ? V::LoadF32(c, n) : V::LoadF32(c);
    } else if constexpr (F == WeightFormat::kBF16) {
      const uint16_t* c = static_cast<const uint16_t*>(codes) + p;
      return kPartial ? V::LoadBf16(c, n) : V::LoadBf16(c);
    } else if constexpr (F == WeightFormat::kFp8E4M3) {
      const uint8_t* c = static_cast<const uint8_t*>(codes) + p;
      return kPartial ? V::LoadFp8(c, scale, n) : V::LoadFp8(c, scale);
    } else if constexpr (F == WeightFormat::kMxInt8) {
      const int8_t* c = static_cast<const int8_t*>(codes) + p;
      return kPartial ? V::LoadInt8(c, scale, n) : V::LoadInt8(c, scale);
    } else {
      const uint8_t* c = static_cast<const uint8_t*>(codes) + p / 2;
      return kPartial ? V::LoadFp4(c, scale, n) : V::LoadFp4(c, scale);
    }
  }
};

// y[r, c] for R rows of x and C weight rows, over all k inputs: runs of blocks that share their
// scales, so each row's scale is looked up once per run.
template <WeightFormat F, int R, int C>
void Tile(const float* x, int64_t ldx, const WeightRow<F>* w, int64_t k, float* y, int64_t ldy) {
  using Vec = typename V::Vec;
  // Fully unrolled, so that the accumulators live in registers.
  Vec acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = V::Zero();
  const int64_t full = k / 16;
  BlockScale<F> scale[C];
  for (int64_t b = 0; b < full;) {
    const int64_t end = WeightRow<F>::RunEnd(w[0].col0, b, full);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) scale[c] = w[c].ScaleOf(b);
    for (; b < end; ++b) {
      Vec wv[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) wv[c] = w[c].template Load<false>(b, scale[c], 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const Vec xv = V::LoadF32(x + r * ldx + 16 * b);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = V::Fma(xv, wv[c], acc[r][c]);
      }
    }
  }
  if (const int tail = static_cast<int>(k - 16 * full); tail > 0) {
    Vec wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = w[c].template Load<true>(full, w[c].ScaleOf(full), tail);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec xv = V::LoadF32(x + r * ldx + 16 * full, tail);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = V::Fma(xv, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = V::Reduce(acc[r][c]);
}

// The tiles above as Block's kernel: x in fp32. (quant_gemm_bf16.cc gives Block its BF16 ones.)
struct Fp32Tiles {
  using X = float;
  template <WeightFormat F, int R, int C>
  static void Run(const float* x, int64_t ldx, const WeightRow<F>* w, int64_t k, float* y,
                  int64_t ldy) {
    Tile<F, R, C>(x, ldx, w, k, y, ldy);
  }
};

// Tiles::Run<F, r, C> for a run-time r in [1, R].
template <WeightFormat F, int C, typename Tiles, int R>
void TileRows(int r, const typename Tiles::X* x, int64_t ldx, const WeightRow<F>* w, int64_t k,
              float* y, int64_t ldy) {
  if constexpr (R >= 1) {
    if (r == R) return Tiles::template Run<F, R, C>(x, ldx, w, k, y, ldy);
    return TileRows<F, C, Tiles, R - 1>(r, x, ldx, w, k, y, ldy);
  }
}

// Bytes of codes in a weight row of k inputs (a bound: whole 32-input groups).
template <WeightFormat F>
constexpr int64_t RowCodeBytes(int64_t k) {
  return (k + 31) / 32 * 4 * CodeBits(F);
}

// How far ahead of the weight row being multiplied (Block) or converted into a panel
// (DequantizeRows, NarrowRows) its codes are requested into L2: a decode step's GEMMs wait on
// memory, and the hardware prefetchers start late on weight rows of a few hundred bytes to a
// few kilobytes (docs/perf.md). The panel path serves from kPanelMinRows rows on, where Block
// only sees the panel already in cache.
inline constexpr int64_t kPrefetchRowsAhead = 4;

// Requests view row j's codes into L2. (Forced inline: an earlier helper for this, left to
// the compiler, came out of GCC 12 with no prefetch instruction.)
template <WeightFormat F>
[[gnu::always_inline]] inline void PrefetchRowCodes(const WeightMatrix& w, int64_t j) {
  const char* codes = static_cast<const char*>(WeightRow<F>(w, j).codes);
  const int64_t bytes = RowCodeBytes<F>(w.cols);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(codes + b, 0, 2);
}

// Rows [i0, i1) x view columns [j0, j1) in tiles of up to R rows x C columns: columns in
// groups of C (then singly), each group against every row, so a group's weights stay in cache
// while the rows stream past; the codes of the rows kPrefetchRowsAhead on are requested
// meanwhile.
template <WeightFormat F, typename Tiles, int R, int C>
void BlockOfTiles(const typename Tiles::X* x, int64_t ldx, const WeightMatrix& w, int64_t i0,
                  int64_t i1, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  const int64_t k = w.cols;
  for (int64_t j = j0; j < j1;) {
    const int cols = j1 - j >= C ? C : 1;
    WeightRow<F> rows[C];
    for (int c = 0; c < cols; ++c) rows[c] = WeightRow<F>(w, j + c);
    const int64_t ahead_end =
        j + kPrefetchRowsAhead + cols < j1 ? j + kPrefetchRowsAhead + cols : j1;
    for (int64_t ahead = j + kPrefetchRowsAhead; ahead < ahead_end; ++ahead) {
      PrefetchRowCodes<F>(w, ahead);
    }
    for (int64_t i = i0; i < i1; i += R) {
      const int r = static_cast<int>(i1 - i < R ? i1 - i : R);
      if (cols == C) {
        TileRows<F, C, Tiles, R>(r, x + i * ldx, ldx, rows, k, y + i * ldy + j, ldy);
      } else {
        TileRows<F, 1, Tiles, R>(r, x + i * ldx, ldx, rows, k, y + i * ldy + j, ldy);
      }
    }
    j += cols;
  }
}

// BlockOfTiles with the instruction set's tile: kTileRows x kTileCols, or up to kFewRows rows
// x kFewRowsTileCols columns when the block has no more rows than that (where one tall
// column's accumulators are too few chains to keep the FMA units busy).
template <WeightFormat F, typename Tiles = Fp32Tiles>
void Block(const typename Tiles::X* x, int64_t ldx, const WeightMatrix& w, int64_t i0, int64_t i1,
           int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if constexpr (V::kFewRows > 0) {
    if (i1 - i0 <= V::kFewRows) {
      return BlockOfTiles<F, Tiles, V::kFewRows, V::kFewRowsTileCols>(x, ldx, w, i0, i1, j0, j1, y,
                                                                      ldy);
    }
  }
  BlockOfTiles<F, Tiles, V::kTileRows, V::kTileCols>(x, ldx, w, i0, i1, j0, j1, y, ldy);
}

// View rows [j0, j1) of w dequantised into out (row stride w.cols).
template <WeightFormat F>
void DequantizeRows(const WeightMatrix& w, int64_t j0, int64_t j1, float* out) {
  const int64_t k = w.cols, full = k / 16;
  const int tail = static_cast<int>(k - 16 * full);
  for (int64_t j = j0; j < j1; ++j) {
    if (j + kPrefetchRowsAhead < w.rows) PrefetchRowCodes<F>(w, j + kPrefetchRowsAhead);
    const WeightRow<F> row(w, j);
    float* dst = out + (j - j0) * k;
    for (int64_t b = 0; b < full; ++b) {
      V::Store(dst + 16 * b, row.template Load<false>(b, row.ScaleOf(b), 16));
    }
    if (tail > 0) {
      V::Store(dst + 16 * full, row.template Load<true>(full, row.ScaleOf(full), tail), tail);
    }
  }
}

// Rows [i0, i1) x columns [j0, j1) of p when the rows are kPanelMinRows or more. Each
// instruction-set file defines it after including this file: as PanelsByDots (below), or as
// GemmByPhases (quant_gemm_phases.h).
template <WeightFormat F>
void Panels(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* scratch);

// Rows per task for PanelsByDots: a block of x stays in the core's L2 while the task's weight
// columns, dequantised once, are swept against it.
inline constexpr int64_t kTaskRowsByDots = 64;

// Panels of internal::kPanelCols columns, each dequantised once into scratch and swept against
// every row by the dot tiles (fp32 weights: read in place).
template <WeightFormat F>
void PanelsByDots(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                  float* scratch) {
  if (F == WeightFormat::kF32) return Block<F>(p.x, p.ldx, p.w, i0, i1, j0, j1, p.y, p.ldy);
  for (int64_t jp = j0; jp < j1; jp += internal::kPanelCols) {
    const int64_t jq = jp + internal::kPanelCols < j1 ? jp + internal::kPanelCols : j1;
    DequantizeRows<F>(p.w, jp, jq, scratch);
    WeightMatrix panel;
    panel.format = WeightFormat::kF32;
    panel.data = scratch;
    panel.row_stride = p.w.cols;
    panel.rows = jq - jp;
    panel.cols = p.w.cols;
    Block<WeightFormat::kF32>(p.x, p.ldx, panel, i0, i1, 0, jq - jp, p.y + jp, p.ldy);
  }
}

template <WeightFormat F>
void GemmBlockFormat(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                     float* scratch) {
  if (i1 - i0 < internal::kPanelMinRows) {
    return Block<F>(p.x, p.ldx, p.w, i0, i1, j0, j1, p.y, p.ldy);
  }
  Panels<F>(p, i0, i1, j0, j1, scratch);
}

void GemmBlock(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
               float* scratch) {
  switch (p.w.format) {
    case WeightFormat::kF32:
      return GemmBlockFormat<WeightFormat::kF32>(p, i0, i1, j0, j1, scratch);
    case WeightFormat::kBF16:
      return GemmBlockFormat<WeightFormat::kBF16>(p, i0, i1, j0, j1, scratch);
    case WeightFormat::kFp8E4M3:
      return GemmBlockFormat<WeightFormat::kFp8E4M3>(p, i0, i1, j0, j1, scratch);
    case WeightFormat::kFp4E2M1:
      return GemmBlockFormat<WeightFormat::kFp4E2M1>(p, i0, i1, j0, j1, scratch);
    case WeightFormat::kMxInt8:
      return GemmBlockFormat<WeightFormat::kMxInt8>(p, i0, i1, j0, j1, scratch);
  }
}

void DequantizeRowsAnyFormat(const WeightMatrix& w, int64_t j0, int64_t j1, float* out) {
  switch (w.format) {
    case WeightFormat::kF32:
      return DequantizeRows<WeightFormat::kF32>(w, j0, j1, out);
    case WeightFormat::kBF16:
      return DequantizeRows<WeightFormat::kBF16>(w, j0, j1, out);
    case WeightFormat::kFp8E4M3:
      return DequantizeRows<WeightFormat::kFp8E4M3>(w, j0, j1, out);
    case WeightFormat::kFp4E2M1:
      return DequantizeRows<WeightFormat::kFp4E2M1>(w, j0, j1, out);
    case WeightFormat::kMxInt8:
      return DequantizeRows<WeightFormat::kMxInt8>(w, j0, j1, out);
  }
}
