// CPU kernels for the DeepSeek-V4-Flash forward pass: number-format decoding, the model's
// quantise-dequantise simulations, norms, RoPE, activations, Hadamard, top-k and the
// hyper-connection Sinkhorn (GEMM: quant_gemm.h). Plain functions over contiguous fp32 buffers;
// the model reaches the compute among them through the CPU backend (engine/backend/ops.h). Every
// reduction whose rounding decides a discontinuous step (quantisation codes, top-k) follows the
// reference's operation order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/number_formats.h"

namespace pdspark::kernels::cpu {

// ---- Number formats (kernels/number_formats.h, shared with the CUDA kernels) ------------------
using kernels::Bf16ToFloat;
using kernels::E8M0ToFloat;     // 2^(bits-127); 255 is NaN.
using kernels::Fp4E2M1ToFloat;  // low 4 bits used.
using kernels::Fp8E4M3ToFloat;
// Round-to-nearest-even onto the E4M3 / E2M1 grids (input already clamped to the range).
using kernels::RoundToE2M1;
using kernels::RoundToE4M3;

// ---- Quantise-dequantise simulations (in place) ---------------------------------------------
// FP8 E4M3 with one power-of-two scale 2^ceil(log2(amax/448)) per `block` values (amax floor
// 1e-4), applied to `cols` leading values of each of `rows` rows of stride `row_stride`.
void Fp8QuantDequant(float* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t block);
// FP4 E2M1 with one power-of-two scale 2^ceil(log2(amax/6)) per `block` values.
void Fp4QuantDequant(float* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t block);

// ---- Linear algebra: quant_gemm.h (GEMM on weights in their checkpoint formats) --------------

// ---- Norms ------------------------------------------------------------------------------
// Mean of squares of `n` values, rounded to fp32 (accumulated in double).
float MeanSquare(const float* x, int64_t n);
// y = weight * (x * rsqrt(mean(x^2) + eps)) per row; weight may be null (unweighted). In place
// allowed.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y);

// ---- RoPE (interleaved pairs) ------------------------------------------------------------
// Per-layer rotary table: cos/sin[position][i] for i < rope_dim/2 up to `max_positions`;
// positions past the table are computed on the fly with the same arithmetic (so a 1M-token
// context does not need a 1M-row table).
struct RopeTable {
  int64_t rope_dim = 0;
  std::vector<float> freqs;  // [rope_dim/2], YaRN-corrected
  std::vector<float> cos;
  std::vector<float> sin;
  int64_t max_positions() const {
    return rope_dim ? static_cast<int64_t>(cos.size()) / (rope_dim / 2) : 0;
  }
};
// YaRN applies when original_seq_len > 0 (reference precompute_freqs_cis).
RopeTable BuildRopeTable(int64_t rope_dim, int64_t max_positions, int64_t original_seq_len,
                         double base, double factor, double beta_fast, double beta_slow);
// Rotates `rope_dim` values at x (interleaved pairs) by position; inverse uses the conjugate.
void ApplyRope(const RopeTable& table, int64_t position, bool inverse, float* x);

// ---- Activations --------------------------------------------------------------------------
float Sigmoid(float x);
float Silu(float x);
// torch.nn.functional.softplus (beta 1, threshold 20) then sqrt.
float SqrtSoftplus(float x);
// out[i] = silu(min(gate, limit)) * clamp(up, -limit, limit) (limit <= 0 disables the clamp).
void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out);

// ---- Hadamard ---------------------------------------------------------------------------
// In-place Sylvester-ordered Walsh-Hadamard transform of `n` (power of two) values times scale.
void HadamardTransform(float* x, int64_t n, float scale);

// ---- Top-k --------------------------------------------------------------------------------
// Indices of the k largest values, largest first; ties keep the lower index first.
std::vector<int32_t> TopK(std::span<const float> values, int64_t k);

// ---- Hyper-connections ---------------------------------------------------------------------
// Splits one token's `(2+hc)*hc` mixes into pre [hc], post [hc] and the Sinkhorn-normalised
// comb [hc*hc] (row j = source stream, column k = destination stream).
void HcSplitSinkhorn(const float* mixes, const float* hc_scale, const float* hc_base, int64_t hc,
                     int64_t sinkhorn_iters, float eps, float* pre, float* post, float* comb);

}  // namespace pdspark::kernels::cpu
