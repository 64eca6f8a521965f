#include "engine/sampling/sampler.h"

#include "engine/sampling/logits_processor.h"
#include "kernels/cpu/gumbel_scan.h"

namespace pdspark::sampling {
namespace {

uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

int32_t SampleCategorical(std::span<const float> weights, double u) {
  double total = 0.0;
  for (float w : weights) total += w;
  if (!(total > 0.0)) return -1;
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_nonzero = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    cumulative += weights[i];
    last_nonzero = static_cast<int32_t>(i);
    if (target < cumulative) return last_nonzero;
  }
  // Rounding can leave target >= the final cumulative sum; the last real token absorbs it.
  return last_nonzero;
}

StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  RETURN_IF_ERROR(params.Validate());
  return Sampler(params, params.seed.has_value() ? *params.seed : RandomSeed());
}

Sampler::Sampler(const SamplingParams& params, uint64_t seed)
    : params_(params), seed_(seed), rng_(seed) {}

std::vector<float> Sampler::ProcessLogits(std::span<const float> logits) const {
  return sampling::ProcessLogits(logits, params_);
}

void Sampler::ProcessLogits(std::span<const float> logits, std::span<float> probs) const {
  sampling::ProcessLogits(logits, params_, probs);
}

int32_t Sampler::Sample(std::span<const float> probs) {
  return SampleCategorical(probs, Uniform());
}

int32_t Sampler::Greedy(std::span<const float> logits) { return Argmax(logits); }

int32_t Sampler::SampleFromLogits(std::span<const float> logits, int64_t position) {
  if (greedy()) return Greedy(logits);
  return GumbelArgmax(logits, GumbelDraw(position));
}

kernels::GumbelRow Sampler::GumbelDraw(int64_t position) const {
  if (greedy()) return {};
  kernels::GumbelRow draw{1.0 / static_cast<double>(params_.temperature), seed_,
                          static_cast<uint64_t>(position)};
  draw.top_k = params_.top_k_enabled() ? params_.top_k : 0;
  draw.top_p = params_.top_p;
  draw.min_p = params_.min_p;
  return draw;
}

int32_t Sampler::GumbelArgmax(std::span<const float> logits, kernels::GumbelRow draw) {
  return kernels::cpu::GumbelArgmaxOfRow(logits.data(), static_cast<int64_t>(logits.size()), draw);
}

double Sampler::Uniform() {
  // The top 53 bits fill a double's mantissa exactly, so the result is < 1.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

}  // namespace pdspark::sampling
