// The serving engine's model runner (vLLM v1's split): the model and the per-request state it
// keeps in the KV pool — a request's sequence state and DSpark context ring, made fresh, adopted
// from a KV transfer or restored from bytes — and one planned step on the backend: the step
// options the batch needs (every row's logits of a request that verifies drafts or wants prompt
// logprobs, else its last row; the drafter's features when speculating; the prefill worker's
// per-layer observers) and the time the target took.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/dspark/drafter.h"
#include "engine/model/model.h"
#include "engine/serving/active_request.h"

namespace pdspark::serving {

struct StepResult {
  engine::StepOutput output;
  double seconds = 0;  // the target's forward, on the backend's clock

  // Request i's rows of logits: one per fed token when it verifies drafts or wants prompt
  // logprobs (ModelRunner::WantsAllLogits), else its last row only.
  const float* Rows(size_t i, int64_t vocab) const {
    return output.logits.data() + output.logit_offsets[i] * vocab;
  }
  // The row of logits that samples request i's next token in a plain step: its last one.
  const float* SampleRow(size_t i, int64_t vocab) const {
    return output.logits.data() + (output.logit_offsets[i + 1] - 1) * vocab;
  }
  // The same rows as argmax ids, when the step returned those instead (argmax_only).
  bool argmax_only() const { return !output.argmax.empty(); }
  const int32_t* ArgmaxRows(size_t i) const {
    return output.argmax.data() + output.logit_offsets[i];
  }
  int32_t SampleArgmax(size_t i) const { return output.argmax[output.logit_offsets[i + 1] - 1]; }
};

class ModelRunner {
 public:
  // `drafter`: null when the engine does not speculate.
  ModelRunner(engine::Model& model, const dspark::Drafter* drafter);

  // A new request's states: fresh ones, or the ones a prefilled request brings (checked against
  // its prompt; a speculating engine needs the prefill worker's ring).
  Status InitStates(ActiveRequest& request) const;
  // An empty context ring (null when not speculating), off the engine thread (thread-safe).
  StatusOr<std::unique_ptr<dspark::DrafterState>> NewRing() const;
  // States from a prefill_only request's serialised bytes.
  StatusOr<std::shared_ptr<PrefilledState>> Restore(std::string_view state,
                                                    std::string_view drafter_state) const;

  // Whether a planned request needs the logits of every token it feeds: it verifies drafts, or
  // its prompt logprobs are still being computed.
  static bool WantsAllLogits(const ActiveRequest& request);

  // Asks for every row of the inputs whose request WantsAllLogits, and runs the step.
  // With `argmax_only` every request's rows come back as argmax ids (OutputProcessor::
  // ArgmaxSuffices must hold for all of them), its last draws[i].size() rows perturbed first
  // for draws[i] (OutputProcessor::ArgmaxDraws; empty: every request greedy).
  StatusOr<StepResult> Run(const std::vector<ActiveRequest*>& planned, bool argmax_only,
                           std::span<engine::StepInput> inputs,
                           std::span<const std::vector<kernels::GumbelRow>> draws = {});

  // Hands back what the model's backends keep of freed memory for reuse (engine idle).
  void ReleaseCachedMemory() const;

 private:
  engine::Model& model_;
  const dspark::Drafter* drafter_;
  std::unique_ptr<engine::backend::Timer> timer_;
};

}  // namespace pdspark::serving
