// The panel path by phases: the canonical dot (quant_gemm.h) of many rows as an outer product,
// for instruction sets whose dot tiles cannot keep the FMA units busy at prefill sizes (AVX2:
// sixteen registers). Included after quant_gemm_tiles.h by the files that take it (their
// Panels), so inside an instruction set's namespace and after its `#pragma GCC target`;
// includes nothing itself.
//
// Lane l of the canonical dot of row r and column c accumulates x[r][16 b + l] * w[c][16 b + l]
// over the blocks b in order, from +0; the sixteen lane sums then meet in a fixed tree. Call
// lane l's sum the phase-l partial P_l[r][c]. For a fixed l it is an ordinary product over the
// blocks, so a vector can hold it for several rows at once (one row per vector lane) and each
// step is one FMA of those rows' x values with column c's weight broadcast: the same FMA, with
// the same operands in the same order, as the dot's lane l. The partials then meet in the
// dot's tree, added vertically. Same bits, and an outer product reads two vectors of x and one
// broadcast per column for 2 x C FMAs where the dot reads one vector per row and column.
//
// V provides, on top of what quant_gemm_tiles.h lists:
//   Part, kParts (Parts per Vec, 16 / kParts lanes each), ZeroPart(), LoadPart(p),
//   BroadcastPart(p), FmaPart(x, w, acc), AddPart(a, b), PartOf(v, part) (a reference to one
//   Part of a Vec), and Transpose16(m):
//   16 Vecs transposed in place (lane l of m[c] swaps with lane c of m[l]).
// quant_gemm_internal.h sizes the scratch (PanelFloats, PanelScratchFloats).

// Rows per tile: one Vec of rows, each lane a row.
inline constexpr int64_t kPhaseTileRows = 16;
static_assert(kPanelCols == 16, "a panel's columns are one Vec: Transpose16 turns them");
// Columns a tile keeps in registers at once: 2 x 6 accumulators, 2 x-parts and a broadcast.
inline constexpr int kPhaseTileCols = 6;
// Rows packed at a time (the instruction set's IsaKernels::task_rows): each panel is dequantised
// and transposed once for them. 128 rows took 1.05-1.15x the prefill tokens/s of 64 on a Zen 3
// (pdspark_model_bench, 512 tokens), 256 no more than 128.
inline constexpr int64_t kPhaseSliceRows = 128;

// Where the panel path by phases keeps its operands, over k inputs (nb = ceil(k / 16) blocks):
// x's tile t at x + t * 16 * 16 * nb as [phase l][block b][16 rows], the panel as [phase l]
// [block b][16 columns], each zero where there is no row, column or input.
struct PhaseOperands {
  float* x = nullptr;
  float* panel = nullptr;
  int64_t blocks = 0;
};

// Loads x's rows [i0, i1) (fewer than 16 left: zero rows after them) and transposes each 16 x 16
// square into the tile layout.
inline void PackRowsByPhase(const float* x, int64_t ldx, int64_t k, int64_t i0, int64_t i1,
                            const PhaseOperands& ops) {
  using Vec = typename V::Vec;
  const int64_t nb = ops.blocks;
  const int tail = static_cast<int>(k - 16 * (k / 16));
  for (int64_t t0 = i0; t0 < i1; t0 += kPhaseTileRows) {
    float* tile = ops.x + (t0 - i0) * 16 * nb;
    const int rows = static_cast<int>(i1 - t0 < kPhaseTileRows ? i1 - t0 : kPhaseTileRows);
    for (int64_t b = 0; b < nb; ++b) {
      Vec m[16];
      const bool partial = tail > 0 && b == nb - 1;
      for (int r = 0; r < 16; ++r) {
        const float* src = x + (t0 + r) * ldx + 16 * b;
        m[r] = r >= rows ? V::Zero() : partial ? V::LoadF32(src, tail) : V::LoadF32(src);
      }
      V::Transpose16(m);
      for (int l = 0; l < 16; ++l) V::Store(tile + (l * nb + b) * 16, m[l]);
    }
  }
}

// Dequantises view rows [j0, j1) of w (at most 16) into the panel layout.
template <WeightFormat F>
void DequantizePanelByPhase(const WeightMatrix& w, int64_t j0, int64_t j1,
                            const PhaseOperands& ops) {
  using Vec = typename V::Vec;
  const int64_t nb = ops.blocks, full = w.cols / 16;
  const int tail = static_cast<int>(w.cols - 16 * full);
  const int cols = static_cast<int>(j1 - j0);
  WeightRow<F> rows[16];
  for (int c = 0; c < cols; ++c) rows[c] = WeightRow<F>(w, j0 + c);
  for (int64_t b = 0; b < nb; ++b) {
    Vec m[16];
    for (int c = 0; c < 16; ++c) {
      if (c >= cols) {
        m[c] = V::Zero();
      } else if (b < full) {
        m[c] = rows[c].template Load<false>(b, rows[c].ScaleOf(b), 16);
      } else {
        m[c] = rows[c].template Load<true>(b, rows[c].ScaleOf(b), tail);
      }
    }
    V::Transpose16(m);
    for (int l = 0; l < 16; ++l) V::Store(ops.panel + (l * nb + b) * 16, m[l]);
  }
}

// The phase-l partials of tile `tile` (16 rows) and panel columns [c0, c0 + C) into
// partials[(l * 16 + c) * kParts + part].
template <int C>
void PhaseTile(const float* tile, const float* panel, int64_t nb, int l, int c0,
               typename V::Part* partials) {
  using Part = typename V::Part;
  constexpr int kParts = V::kParts, kPartLanes = 16 / V::kParts;
  Part acc[kParts][C];
#pragma GCC unroll 8
  for (int p = 0; p < kParts; ++p)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[p][c] = V::ZeroPart();
  const float* x = tile + l * nb * 16;
  const float* wl = panel + l * nb * 16 + c0;
  for (int64_t b = 0; b < nb; ++b) {
    Part xv[kParts];
#pragma GCC unroll 8
    for (int p = 0; p < kParts; ++p) xv[p] = V::LoadPart(x + 16 * b + p * kPartLanes);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const Part wv = V::BroadcastPart(wl + 16 * b + c);
#pragma GCC unroll 8
      for (int p = 0; p < kParts; ++p) acc[p][c] = V::FmaPart(xv[p], wv, acc[p][c]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < kParts; ++p)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) partials[(l * 16 + c0 + c) * kParts + p] = acc[p][c];
}

// PhaseTile<c> for a run-time c in [1, C].
template <int C>
void PhaseTileCols(int c, const float* tile, const float* panel, int64_t nb, int l, int c0,
                   typename V::Part* partials) {
  if constexpr (C >= 1) {
    if (c == C) return PhaseTile<C>(tile, panel, nb, l, c0, partials);
    return PhaseTileCols<C - 1>(c, tile, panel, nb, l, c0, partials);
  }
}

// y[r][c] for the tile's `rows` rows and the panel's `cols` columns: each column's sixteen
// partials through the canonical tree ((l, l+8), (l, l+4), (l, l+2), (l, l+1)), vertically,
// then transposed so that each row of y is written whole.
inline void ReducePartials(const typename V::Part* partials, int rows, int cols, float* y,
                           int64_t ldy) {
  using Part = typename V::Part;
  using Vec = typename V::Vec;
  constexpr int kParts = V::kParts;
  Vec m[16];  // m[c]: column c of the tile's output, one row per lane
  for (int c = 0; c < 16; ++c) {
    m[c] = V::Zero();
    if (c >= cols) continue;
    for (int p = 0; p < kParts; ++p) {
      // Unrolled, so that the tree stays in registers.
      Part s[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) s[l] = partials[(l * 16 + c) * kParts + p];
#pragma GCC unroll 4
      for (int half = 8; half >= 1; half /= 2) {
#pragma GCC unroll 8
        for (int l = 0; l < half; ++l) s[l] = V::AddPart(s[l], s[l + half]);
      }
      V::PartOf(m[c], p) = s[0];
    }
  }
  V::Transpose16(m);
  for (int r = 0; r < rows; ++r) {
    if (cols == 16) {
      V::Store(y + r * ldy, m[r]);
    } else {
      V::Store(y + r * ldy, m[r], cols);
    }
  }
}

// Rows [i0, i1) x columns [j0, j1) of p by phases: the rows packed once per kPhaseSliceRows,
// then panels of 16 columns, each dequantised once and swept against every tile of rows.
template <WeightFormat F>
void GemmByPhases(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                  float* scratch) {
  PhaseOperands ops;
  ops.blocks = (p.w.cols + 15) / 16;
  ops.panel = scratch;
  ops.x = scratch + PanelFloats(p.w.cols);
  typename V::Part partials[16 * 16 * V::kParts];
  for (int64_t s0 = i0; s0 < i1; s0 += kPhaseSliceRows) {
    const int64_t s1 = s0 + kPhaseSliceRows < i1 ? s0 + kPhaseSliceRows : i1;
    PackRowsByPhase(p.x, p.ldx, p.w.cols, s0, s1, ops);
    for (int64_t jp = j0; jp < j1; jp += kPanelCols) {
      const int cols = static_cast<int>(jp + kPanelCols < j1 ? kPanelCols : j1 - jp);
      DequantizePanelByPhase<F>(p.w, jp, jp + cols, ops);
      for (int64_t t0 = s0; t0 < s1; t0 += kPhaseTileRows) {
        const float* tile = ops.x + (t0 - s0) * 16 * ops.blocks;
        for (int l = 0; l < 16; ++l) {
          int c0 = 0;
          for (; c0 + kPhaseTileCols <= cols; c0 += kPhaseTileCols) {
            PhaseTile<kPhaseTileCols>(tile, ops.panel, ops.blocks, l, c0, partials);
          }
          if (c0 < cols) {
            PhaseTileCols<kPhaseTileCols>(cols - c0, tile, ops.panel, ops.blocks, l, c0, partials);
          }
        }
        const int rows = static_cast<int>(s1 - t0 < kPhaseTileRows ? s1 - t0 : kPhaseTileRows);
        ReducePartials(partials, rows, cols, p.y + t0 * p.ldy + jp, p.ldy);
      }
    }
  }
}
