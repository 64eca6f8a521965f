// Per-request sampler: the request's SamplingParams plus its own RNG. Each request owns one, so
// a seeded request draws the same random numbers whatever else is in the batch and however the
// scheduler splits its work across steps.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "engine/sampling/sampling_params.h"
#include "kernels/gumbel_sampling.h"

namespace pdspark::sampling {

// Inverse-CDF draw from a non-negative weight vector (need not sum to 1) with u in [0, 1).
// Never returns a zero-weight token; returns -1 when all weights are 0.
int32_t SampleCategorical(std::span<const float> weights, double u);

class Sampler {
 public:
  // Validates `params`; seeds from params.seed, or from std::random_device when absent.
  static StatusOr<Sampler> Create(const SamplingParams& params);

  const SamplingParams& params() const { return params_; }
  // The seed actually in use; log it so an unseeded request can be replayed.
  uint64_t seed() const { return seed_; }
  bool greedy() const { return params_.greedy(); }

  // The request's distribution over the vocabulary (see logits_processor.h).
  std::vector<float> ProcessLogits(std::span<const float> logits) const;
  void ProcessLogits(std::span<const float> logits, std::span<float> probs) const;

  // Draws one token from `probs` (weights, need not be normalised); consumes one RNG draw.
  int32_t Sample(std::span<const float> probs);

  // Argmax over logits, lowest id on ties. Consumes no randomness.
  static int32_t Greedy(std::span<const float> logits);

  // Plain (non-speculative) decoding of one position: Greedy for greedy params, else the
  // Gumbel-max draw (kernels/gumbel_sampling.h) of (seed, `position`) alone, over the tokens the
  // request's top-k, top-p and min-p keep (kernels/sampling_cut.h): a sample of the softmax of
  // logits / T renormalised over them. So a GPU can draw it where the logits are (Ops::
  // GumbelArgMax after the cut) and the host the same token from a row it holds, whatever the
  // step's batch. `position`: the sampled token's position in the sequence.
  int32_t SampleFromLogits(std::span<const float> logits, int64_t position);

  // The draw of the token at `position` (inv_temperature 0 when greedy), its cut not yet set.
  kernels::GumbelRow GumbelDraw(int64_t position) const;
  // The argmax of the row perturbed for `draw` by the argmax rule (kernels/argmax_rule.h), the
  // draw's cut set from the row first.
  static int32_t GumbelArgmax(std::span<const float> logits, kernels::GumbelRow draw);

  // Uniform double in [0, 1) from the request RNG, with 53 random bits. Built from raw engine
  // output rather than std::uniform_real_distribution so streams match across standard libs.
  double Uniform();

 private:
  Sampler(const SamplingParams& params, uint64_t seed);

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
};

}  // namespace pdspark::sampling
