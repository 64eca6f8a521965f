// Sampling a token from softmax(logits / T) as the argmax of logits / T + Gumbel noise (the
// Gumbel-max trick). The noise of token i is a function of (seed, counter, i) alone, drawn from
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), a
// counter-based generator: any thread can draw any token's noise without a shared state. So a
// draw is the same whatever the batch around the row, the device, or the tensor-parallel cut of
// the vocabulary: each rank perturbs its slice (Ops::GumbelArgMax) and the ranks' winners merge
// by the argmax rule (kernels/argmax_rule.h), as a greedy row's do. Only the winner's id crosses
// to the host.
//
// Header-only and C++17, shared by the CPU and CUDA backends and the host's sampler.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/argmax_rule.h"
#include "kernels/number_formats.h"

namespace pdspark::kernels {

// One logits row's draw: inv_temperature 0 leaves the row as it is (greedy); `counter` tells
// draws of one seed apart (the engine uses the sampled token's position).
struct GumbelRow {
  double inv_temperature = 0.0;
  uint64_t seed = 0;
  uint64_t counter = 0;
  // Top-k (0: off), then top-p (1: off) and min-p (0: off), in vLLM's order: the draw takes
  // only the tokens these masks keep, which SetSamplingCut (kernels/sampling_cut.h) turns into
  // the cut below from the row's highest logits. Only tokens at or above the cut compete: a
  // larger logit than `cut`, or the same logit and an id no larger than `cut_token`.
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float cut = -INFINITY;
  int32_t cut_token = INT32_MAX;
};

// Whether the draw masks its row (top-k, top-p or min-p on).
PDSPARK_HOST_DEVICE inline bool HasMasks(const GumbelRow& row) {
  return row.top_k > 0 || row.top_p < 1.0f || row.min_p > 0.0f;
}

// Whether `token`'s logit is at or above `row`'s cut (every token without masks).
PDSPARK_HOST_DEVICE inline bool AboveCut(float logit, const GumbelRow& row, int64_t token) {
  return !HasMasks(row) || logit > row.cut || (logit == row.cut && token <= row.cut_token);
}

// Philox4x32-10 of counter c under key k, in place: ten rounds of two 32x32->64 multiplies, the
// key bumped by the Weyl constants between rounds (Random123's philox4x32_R).
PDSPARK_HOST_DEVICE inline void Philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t c1 = c[1], c3 = c[3];
    c[0] = hi1 ^ c1 ^ k0;
    c[1] = lo1;
    c[2] = hi0 ^ c3 ^ k1;
    c[3] = lo0;
  }
}

// Standard Gumbel noise -log(-log(u)) of u = (bits + 0.5) / 2^52 for 52 random bits: u is
// centred in its bucket, so it is never 0 or 1 (a 53rd bit would let 1 - 2^-54 round to 1, and
// the noise be infinite), and the noise lies in [-3.61, 36.74]. Double precision: the host's and
// the device's log differ by at most an ulp.
PDSPARK_HOST_DEVICE inline double GumbelOfBits(uint64_t bits) {
  const double u = (static_cast<double>(bits & ((uint64_t{1} << 52) - 1)) + 0.5) * 0x1p-52;
  return -log(-log(u));
}

// Above every noise GumbelOfBits gives: a token whose logit / T is this far below the best key
// found cannot win.
inline constexpr double kMaxGumbelNoise = 36.75;

// Token `token`'s 52 random bits for draw (seed, counter), from Philox (counter words: token,
// counter; key: seed).
PDSPARK_HOST_DEVICE inline uint64_t GumbelBits(uint64_t seed, uint64_t counter, int64_t token) {
  const uint64_t t = static_cast<uint64_t>(token);
  uint32_t c[4] = {static_cast<uint32_t>(t), static_cast<uint32_t>(t >> 32),
                   static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32)};
  Philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (static_cast<uint64_t>(c[1]) << 32 | c[0]) >> 12;
}

// Token `token`'s noise for draw (seed, counter).
PDSPARK_HOST_DEVICE inline double GumbelNoise(uint64_t seed, uint64_t counter, int64_t token) {
  return GumbelOfBits(GumbelBits(seed, counter, token));
}

// An upper bound of GumbelOfBits(bits) without a logarithm, within 0.06 of -log(1 - u): as
// -log u >= 1 - u, the noise -log(-log u) is at most -log(w) for w = 1 - u (exact in double),
// and for w = m 2^e with m in [1, 2), -log w = -(e + log2 m) ln 2 <= -(e + m - 1) ln 2 (log2 is
// concave, so above its chord on [1, 2]). Most tokens of a row are ruled out by it: -log(1 - u)
// is exponentially distributed, so a token whose logit / T lies d below the best key passes
// with probability about e^-d.
inline double GumbelNoiseBound(uint64_t bits) {
  const double w = (0x1p52 - static_cast<double>(bits & ((uint64_t{1} << 52) - 1)) - 0.5) * 0x1p-52;
  // w = m 2^e, read from its bits (w >= 2^-53 is a normal double).
  uint64_t w_bits = 0;
  std::memcpy(&w_bits, &w, sizeof(w));
  const int exponent = static_cast<int>((w_bits >> 52) & 0x7FF) - 1023;
  const uint64_t m_bits = (w_bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);
  double m = 0.0;
  std::memcpy(&m, &m_bits, sizeof(m));
  const double log2_lower = static_cast<double>(exponent) + (m - 1.0);
  return -log2_lower * 0.6931471805599453;
}

// Token `token`'s logit perturbed for `row`'s draw: logit / T + its noise, rounded to float once
// (-inf stays -inf: a masked token never wins; NaN stays NaN); -inf below the row's cut.
PDSPARK_HOST_DEVICE inline float GumbelKey(float logit, const GumbelRow& row, int64_t token) {
  if (row.inv_temperature == 0.0) return logit;
  if (!AboveCut(logit, row, token)) return -INFINITY;
  return static_cast<float>(static_cast<double>(logit) * row.inv_temperature +
                            GumbelNoise(row.seed, row.counter, token));
}

}  // namespace pdspark::kernels
