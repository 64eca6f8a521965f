// Per-token CPU cost of the sampler on a DeepSeek-V4-sized vocabulary (129280), for each mask,
// for a Gumbel-max draw, and for verifying a gamma = 5 DSpark round.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampling/logits_processor.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/speculative_acceptance.h"

namespace pdspark::sampling {
namespace {

constexpr int64_t kVocab = 129280;

std::vector<float> RandomLogits(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(n);
  for (float& x : logits) x = normal(rng);
  return logits;
}

SamplingParams Params(float temperature, int32_t top_k, float top_p, float min_p) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  params.seed = 1;
  return params;
}

void BM_ProcessLogits(benchmark::State& state, SamplingParams params) {
  const std::vector<float> logits = RandomLogits(kVocab, 1);
  std::vector<float> probs(kVocab);
  for (auto _ : state) {
    ProcessLogits(logits, params, probs);
    benchmark::DoNotOptimize(probs.data());
  }
}
BENCHMARK_CAPTURE(BM_ProcessLogits, greedy, Params(0.0f, -1, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_ProcessLogits, softmax, Params(1.0f, -1, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_ProcessLogits, top_k_50, Params(0.7f, 50, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_ProcessLogits, top_p_0_95, Params(0.7f, -1, 0.95f, 0.0f));
BENCHMARK_CAPTURE(BM_ProcessLogits, top_p_0_95_flat, Params(5.0f, -1, 0.95f, 0.0f));
BENCHMARK_CAPTURE(BM_ProcessLogits, min_p_0_05, Params(0.7f, -1, 1.0f, 0.05f));
BENCHMARK_CAPTURE(BM_ProcessLogits, all, Params(0.7f, 50, 0.95f, 0.05f));

// A plain sampled row as the engine draws it (Sampler::SampleFromLogits: Gumbel-max with the
// noise of (seed, position) after the masks' cut), a new position each iteration.
void BM_GumbelDraw(benchmark::State& state, SamplingParams params) {
  const std::vector<float> logits = RandomLogits(kVocab, 1);
  auto sampler = *Sampler::Create(params);
  int64_t position = 0;
  for (auto _ : state) benchmark::DoNotOptimize(sampler.SampleFromLogits(logits, ++position));
}
BENCHMARK_CAPTURE(BM_GumbelDraw, t_1_0, Params(1.0f, -1, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_GumbelDraw, t_0_7, Params(0.7f, -1, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_GumbelDraw, t_0_2, Params(0.2f, -1, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_GumbelDraw, top_k_50, Params(0.7f, 50, 1.0f, 0.0f));
BENCHMARK_CAPTURE(BM_GumbelDraw, top_p_0_95, Params(0.7f, -1, 0.95f, 0.0f));

void BM_VerifyRound(benchmark::State& state) {
  constexpr int kGamma = 5;
  const SamplingParams params = Params(0.7f, -1, 0.95f, 0.0f);
  std::vector<float> target(static_cast<size_t>(kGamma + 1) * kVocab);
  std::vector<float> draft(static_cast<size_t>(kGamma) * kVocab);
  ProcessLogitsRows(RandomLogits(target.size(), 2), kVocab, params, target);
  ProcessLogitsRows(RandomLogits(draft.size(), 3), kVocab, params, draft);
  std::vector<int32_t> tokens(kGamma);
  auto sampler = *Sampler::Create(params);
  for (int k = 0; k < kGamma; ++k) {
    tokens[k] = sampler.Sample(std::span(draft).subspan(k * kVocab, kVocab));
  }
  const DraftVerification input = {
      .draft_tokens = tokens, .draft_probs = draft, .target_probs = target, .vocab_size = kVocab};
  for (auto _ : state) benchmark::DoNotOptimize(AcceptRejectionSampling(input, sampler));
}
BENCHMARK(BM_VerifyRound);

}  // namespace
}  // namespace pdspark::sampling

BENCHMARK_MAIN();
