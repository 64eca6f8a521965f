// Between the GEMM dispatcher (quant_gemm.cc) and the per-instruction-set kernels
// (quant_gemm_{avx512,avx2,portable}.cc). Not for use outside kernels/cpu.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "kernels/cpu/quant_gemm.h"

namespace pdspark::kernels::cpu::internal {

// The kernels of one instruction set (quant_gemm_{avx512,avx2,portable}.cc each define one
// table); quant_gemm.h documents what they compute.
struct IsaKernels {
  // Outputs rows [i0, i1) x columns [j0, j1) of `p`, at most task_rows rows once they are
  // kPanelMinRows or more. `scratch` (there; null below) holds at least
  // PanelScratchFloats(p.w.cols, task_rows) floats, for dequantising a panel of columns once
  // when many rows share them.
  void (*gemm_block)(const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                     float* scratch);
  // View rows [j0, j1) of w as fp32 into out (row stride w.cols); the view's column origin on
  // a 16-column boundary for quantised formats.
  void (*dequantize_rows)(const WeightMatrix& w, int64_t j0, int64_t j1, float* out);
  double (*dot_double)(const float* a, const float* b, int64_t n);
  void (*add_scaled_double)(double weight, const float* x, int64_t n, double* acc);
  void (*dot_double_rows)(const float* x, const double* rows, int64_t count, int64_t ld, int64_t n,
                          double* out);
  void (*add_scaled_double_rows)(const double* weights, const double* rows, int64_t count,
                                 int64_t ld, int64_t n, double* acc);
  // Rows per task once rows are many (from kPanelMinRows): what gemm_block's panels take at once.
  int64_t task_rows;
};
extern const IsaKernels kAvx512Kernels;
extern const IsaKernels kAvx2Kernels;
extern const IsaKernels kPortableKernels;

// The BF16 dot (quant_gemm_bf16.cc; quant_gemm.h documents it), for CPUs with AVX512-BF16.
// x: the problem's rows [0, p.m) rounded to BF16 with row stride ldx, each row zero-padded to a
// multiple of kBf16DotInputs. Outputs rows [i0, i1) x columns [j0, j1) of p; `scratch` holds at
// least PanelFloats(p.w.cols) floats, for its panels of weight rows narrowed once.
inline constexpr int64_t kBf16DotInputs = 32;
void Bf16DotGemmBlock(const uint16_t* x, int64_t ldx, const GemmProblem& p, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1, float* scratch);
// Rows [0, m) of x (row stride ldx, k values each) rounded to BF16 into out (row stride ldo >= k,
// the values from k to ldo zero).
void RoundRowsToBf16(const float* x, int64_t m, int64_t ldx, int64_t k, uint16_t* out, int64_t ldo);

// The int8 dot (quant_gemm_int8.cc; quant_gemm.h documents it), for CPUs with AVX2: x's rows
// quantised to int8 codes per 32-input group, each group with its fp32 scale.
inline constexpr int64_t kInt8DotInputs = 32;
struct Int8Rows {
  int8_t* codes = nullptr;  // row i's group g at codes + i * ld + 32 g, zero-padded past k
  float* scales = nullptr;  // row i's group g at scales + i * groups + g
  int64_t ld = 0;           // 32 * groups
  int64_t groups = 0;
};
// Rows [0, m) of x (row stride ldx, k values each) quantised into `out` (its groups cover k).
void QuantizeRowsToInt8(const float* x, int64_t m, int64_t ldx, int64_t k, const Int8Rows& out);
// Outputs rows [i0, i1) x columns [j0, j1) of `p` (MXINT8 or FP4 weights) from x's codes.
void Int8DotGemmBlock(const Int8Rows& x, const GemmProblem& p, int64_t i0, int64_t i1, int64_t j0,
                      int64_t j1);

// From this many rows on, a task dequantises its weight columns into scratch once and sweeps
// them against its rows (quant_gemm_tiles.h: Panels; same bits: dequantisation is exact);
// below, it dequantises in registers.
inline constexpr int64_t kPanelMinRows = 64;
// Columns of such a panel: a multiple of every path's column tile, small enough for the core's
// L2 at the model's widest inputs.
inline constexpr int64_t kPanelCols = 16;
// Floats of a panel of kPanelCols columns over k inputs, padded to whole 16-wide blocks.
constexpr int64_t PanelFloats(int64_t k) { return kPanelCols * ((k + 15) / 16 * 16); }
// Floats of a task's scratch for k inputs and up to `rows` rows: a panel, and the rows of x
// packed (quant_gemm_phases.h).
constexpr int64_t PanelScratchFloats(int64_t k, int64_t rows) {
  return PanelFloats(k) + rows * ((k + 15) / 16 * 16);
}

// 2^(code - 127); 255 is NaN (the OCP MX E8M0 encoding).
constexpr float E8M0Value(uint8_t code) {
  if (code == 0xFF) return std::bit_cast<float>(0x7FC00000u);
  if (code == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, a subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(code) << 23);
}

// E8M0 code -> its value, and its value times 256 (for vector FP8 decodes that yield
// value / 256: see quant_gemm_avx512.cc). Codes >= 247 overflow the latter;
// CheckWeightValues refuses FP8 weights with such scales.
inline constexpr std::array<float, 256> kE8M0Values = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = E8M0Value(static_cast<uint8_t>(c));
  return t;
}();
inline constexpr std::array<float, 256> kE8M0Times256 = [] {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = c >= 247 && c != 0xFF ? std::bit_cast<float>(0x7F800000u)  // overflows
                                 : E8M0Value(static_cast<uint8_t>(c)) * 256.0f;
  }
  return t;
}();

}  // namespace pdspark::kernels::cpu::internal
