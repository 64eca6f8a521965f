// GEMM on weights in their checkpoint format (FP8 E4M3 with 128x128 E8M0 blocks, packed FP4
// E2M1 with per-32 E8M0 scales, BF16, F32), dequantised in registers: y = x . W^T with x in
// fp32 and fp32 accumulation, the reference's "fp32 GEMM on dequantised weights".
//
// Every output element is computed by one fixed sequence of operations (the "canonical dot"):
// 16 lane accumulators, lane l summing x[p] * w[p] for p = l, l + 16, l + 32, ... with fused
// multiply-adds in order of p, then the lanes added in a fixed tree ((l, l+8), then (l, l+4),
// (l, l+2), (l, l+1)). Dequantisation is exact (every format widens to fp32 exactly and scales
// are powers of two). So:
//   - a row's result does not depend on the other rows of x (batch invariance, any m);
//   - a column slice of W gives the same bits as those columns of the whole product, and a
//     quantised W gives the same bits as its fp32 dequantisation (the --weights fp32 switch);
//   - the AVX-512, AVX2 and portable paths give identical bits, and the split over threads
//     changes nothing.
//
// The BF16 dot (GemmPrecision::kBf16Dot, the "fast kernels") trades those bits for twice the
// multiply-adds per instruction where the CPU has AVX512-BF16 (vdpbf16ps): x rounded to BF16
// (to nearest even; subnormals flushed), the weights converted to BF16 exactly (FP8, FP4 and
// BF16 codes times their power-of-two scales are BF16 values), and lane l of 16 summing, for
// q = 0, 1, ..., the exact products of inputs p = 32 q + 2 l + 1 and then p = 32 q + 2 l, each
// sum rounded to fp32 (subnormal sums flushed to zero), then the canonical tree. Its error
// against the exact product is within 2^-8 sum |x w| (x's rounding is at most 2^-9 relative).
// It is still batch-, slice- and thread-invariant. F32 weights, views whose column origin is
// not on a 32-column boundary, CPUs without AVX512-BF16 and a forced instruction set other than
// AVX-512 (SetGemmIsa) take the exact path.
//
// The int8 dot (GemmPrecision::kInt8Dot, the fast kernels on CPUs with AVX2 but no AVX512-BF16)
// multiplies integers, as llama.cpp's Q8_0 kernels do: each row of x is quantised per 32-input
// group g (counted from the view's column 0) to codes q = round(x * 127 / a_g) (to nearest even;
// a_g the group's largest |x|, its scale d_g = a_g / 127), and the weights are int8 codes too:
// MXINT8 codes as they are (multiplier 2^-6 times the group's E8M0 scale s_g) and FP4 codes as
// twice their E2M1 value (multiplier s_g / 2). For each output, eight fp32 lanes, lane l adding
// for g = 0, 1, ... the exact integer sum of the products of inputs 32 g + 4 l .. 32 g + 4 l + 3,
// converted to fp32 and multiplied by the fp32 product d_g * multiplier_g (one fused
// multiply-add), then the tree ((l, l+4), (l, l+2), (l, l+1)). Against the exact product on the
// same weights the error is within sum_g (a_g / 254) sum_{p in g} |w_p| plus fp32 accumulation;
// FP8 weights take it once requantised to MXINT8 (mxint8.h), BF16 and F32 take the exact path.
// It is batch-, slice- and thread-invariant. Views whose column origin is not on a 32-column
// boundary and CPUs without AVX2 (or a forced portable instruction set) take the exact path.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/weight_matrix.h"

namespace pdspark::kernels::cpu {

class ThreadPool;

// How a product multiplies (see above).
enum class GemmPrecision { kExact, kBf16Dot, kInt8Dot };

// One product y[i, j] = sum_p x[i, p] * w(j, p), i < m, j < w.rows, p < w.cols.
struct GemmProblem {
  const float* x = nullptr;
  int64_t m = 0;
  int64_t ldx = 0;
  WeightMatrix w;
  float* y = nullptr;
  int64_t ldy = 0;
  GemmPrecision precision = GemmPrecision::kExact;
};

// Runs the product on `pool`'s threads (the caller's thread alone when null).
void Gemm(const GemmProblem& problem, ThreadPool* pool = nullptr);
// Several independent products in one parallel region (the routed experts of a MoE layer).
void GroupedGemm(std::span<const GemmProblem> problems, ThreadPool* pool = nullptr);

// a . b over n floats in double: 8 lanes, lane l summing the exact products of p = l, l + 8, ...,
// then the lanes in a fixed tree. For decisions that should sit as close to exact arithmetic as
// possible (attention scores, the indexer's top-k). The same bits on every instruction set.
double DotDouble(const float* a, const float* b, int64_t n);
// acc[c] += weight * x[c] in double, c < n (one rounding per element).
void AddScaledDouble(double weight, const float* x, int64_t n, double* acc);
// The same two for one x and many rows, faster, the same bits. The rows are floats widened to
// double by the caller once (row i at rows + i * ld), so that attention widens each query once
// for all its keys and each key once for all its heads:
//   out[i] = DotDouble(rows_i, x, n), for i < count;
//   acc[c] += weights[i] * rows_i[c] for i = 0, 1, ..., count - 1 in turn (AddScaledDouble each).
void DotDoubleRows(const float* x, const double* rows, int64_t count, int64_t ld, int64_t n,
                   double* out);
void AddScaledDoubleRows(const double* weights, const double* rows, int64_t count, int64_t ld,
                         int64_t n, double* acc);

// Rows [begin, end) of w as fp32 values into out (row stride w.cols): embedding lookups and the
// --weights fp32 copies. Exact, and the same values the GEMM multiplies by.
void DequantizeRows(const WeightMatrix& w, int64_t begin, int64_t end, float* out);

// What in the view's values the kernels cannot decode, or an empty string: an FP8 E4M3 NaN code
// (s 1111 111: the vector decode has no NaN, and a NaN weight is a corrupt checkpoint) or an FP8
// block scale of 2^120 or more (the vector decode multiplies by 256 * scale). Reads every FP8
// code of the view once; other formats have nothing to check.
std::string CheckWeightValues(const WeightMatrix& w);
// Whether a view with checked values can go through the GEMM: a quantised view's column origin
// on kCpuColumnAlignment (DequantizeRows reads any view).
bool GemmSupports(const WeightMatrix& w);

// The instruction set the kernels use; kAuto picks the best the CPU has. Tests force each one
// to check they agree bit for bit.
enum class GemmIsa { kAuto, kAvx512, kAvx2, kPortable };
void SetGemmIsa(GemmIsa isa);
GemmIsa ActiveGemmIsa();
bool CpuSupports(GemmIsa isa);
// Whether this CPU runs GemmPrecision::kBf16Dot (AVX-512 with BF16), and whether a product of
// that precision on `w` takes it now (else it takes the exact path).
bool CpuSupportsBf16Dot();
bool TakesBf16Dot(const GemmProblem& p);
// The same for GemmPrecision::kInt8Dot (AVX2).
bool CpuSupportsInt8Dot();
bool TakesInt8Dot(const GemmProblem& p);
const char* GemmIsaName(GemmIsa isa);

}  // namespace pdspark::kernels::cpu
