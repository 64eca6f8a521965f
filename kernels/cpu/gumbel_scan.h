// The CPU's Gumbel-max draw over a row of logits (kernels/gumbel_sampling.h): the winner of a
// row perturbed for a draw, scanning in order and passing over the tokens that cannot win, with
// the tokens' Philox bits drawn sixteen at a time in vector registers. Used by the CPU backend
// (Ops::GumbelArgMax, on slices of the vocabulary) and by the host's sampler (whole rows); the
// CUDA backend computes the same keys (GumbelKey) in its own kernel.
#pragma once

#include <cstdint>

#include "kernels/argmax_rule.h"
#include "kernels/gumbel_sampling.h"

namespace pdspark::kernels::cpu {

inline constexpr int kGumbelLanes = 16;

// bits[l] = GumbelBits(seed, counter, first_token + l) for every lane l.
void GumbelBitsOfLanes(uint64_t seed, uint64_t counter, int64_t first_token,
                       uint64_t bits[kGumbelLanes]);

// The winner of values [begin, end) of a row (value j is token first_token + j) perturbed for
// `draw` (GumbelKey, its cut included), by the argmax rule: the full scan's in order. A value
// that cannot beat the best key so far (nor tie it: its key would round to a float no larger,
// and the best came first) is passed over without drawing its noise when its logit / T is more
// than kMaxGumbelNoise below the best (most of a peaked row), else without its logarithms when
// the GumbelNoiseBound of its bits says so (most of the rest).
ArgmaxCandidate GumbelArgmaxScan(const float* row, int64_t begin, int64_t end,
                                 const GumbelRow& draw, int64_t first_token);

// The token `draw` takes from a whole row the host holds (values [0, n) are tokens 0..n-1): the
// scan's winner, the draw's cut set from the row first (kernels/sampling_cut.h). What a device
// finds where the row's slices are (Ops::GumbelArgMax after the ranks' cut).
int32_t GumbelArgmaxOfRow(const float* row, int64_t n, GumbelRow draw);

}  // namespace pdspark::kernels::cpu
