// The measurement both model benchmarks make (pdspark_model_bench, pdspark_tp_bench): `batch`
// fresh sequences of random prompts prefilled in one step, then `steps` batched decode steps of
// one random token each, as tokens per second. The steps return each sequence's logits row, or
// only its argmax id (what greedy serving asks for), or the argmax of the row perturbed for a
// Gumbel-max draw at temperature 1 (what plain temperature sampling asks for).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "engine/model/model.h"

namespace pdspark::bench {

enum class Head { kLogits, kArgmax, kSample };

struct Rates {
  double prefill = 0;  // tokens/s
  double decode = 0;
};

inline bool RunPrefillDecodeRound(engine::Model& model, int64_t batch, int64_t prefill_len,
                                  int64_t steps, std::mt19937& rng, Rates& out,
                                  Head head = Head::kLogits) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(model.dims().vocab) - 1);
  engine::StepOptions options;
  options.logits = engine::LogitsMode::kLastTokenPerSequence;
  options.argmax_only = head != Head::kLogits;
  // Each sequence's draw of the token at `position`.
  auto draw = [&](int64_t position) {
    if (head != Head::kSample) return;
    options.sample.assign(batch, {1.0, 1, static_cast<uint64_t>(position)});
  };
  draw(prefill_len);
  std::vector<std::unique_ptr<engine::SequenceState>> seqs;
  std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>(prefill_len));
  std::vector<engine::StepInput> inputs(batch);
  for (int64_t b = 0; b < batch; ++b) {
    seqs.push_back(model.NewSequence());
    for (int32_t& t : prompts[b]) t = token(rng);
    inputs[b] = {seqs[b].get(), prompts[b]};
  }
  auto t0 = Clock::now();
  if (!model.Step(inputs, options).ok()) return false;
  out.prefill = batch * prefill_len / seconds(t0);
  std::vector<int32_t> next(batch);
  t0 = Clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t b = 0; b < batch; ++b) {
      next[b] = token(rng);
      inputs[b] = {seqs[b].get(), std::span<const int32_t>(&next[b], 1)};
    }
    draw(prefill_len + step + 1);
    if (!model.Step(inputs, options).ok()) return false;
  }
  out.decode = batch * steps / seconds(t0);
  return true;
}

// An untimed round of the same shape, as llama-bench's warm-up run: the first steps after
// loading touch the mapped weights' pages and the step's activation buffers for the first time
// (a page fault per 4 KiB, expensive on some VMs), which serving pays once (the CPU backend
// keeps freed activation blocks for the next step) and a benchmark should not count. Three
// decode steps: with CUDA graphs, a step's repeated launches are captured at its third
// (engine/backend/cuda/graph_planner.h) and replayed from then on, as in serving.
inline bool WarmUp(engine::Model& model, int64_t batch, int64_t prefill_len) {
  std::mt19937 rng(0);
  Rates ignored;
  return RunPrefillDecodeRound(model, batch, prefill_len, 3, rng, ignored);
}

}  // namespace pdspark::bench
