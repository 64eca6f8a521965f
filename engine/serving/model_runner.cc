#include "engine/serving/model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/model/batch.h"

namespace pdspark::serving {

ModelRunner::ModelRunner(engine::Model& model, const dspark::Drafter* drafter)
    : model_(model), drafter_(drafter), timer_(model.backend(0).NewTimer()) {}

// A prefilled (disaggregated) request brings its prompt's state, restored on the decode
// worker's gRPC thread, and — when this engine speculates — the DSpark context ring the prefill
// worker built from the same features a colocated prefill would have used. Rebuilding the ring
// here instead would cost a second prompt forward, so a missing ring is an error.
Status ModelRunner::InitStates(ActiveRequest& request) const {
  const RequestSpec& spec = request.spec;
  if (!spec.prefilled) {
    request.state = model_.NewSequence();
    request.state->KeepRowsFrom(spec.keep_rows_from);
    // prefill_only requests build the ring too: the prefill worker ships it with the state.
    ASSIGN_OR_RETURN(request.drafter_state, NewRing());
    return absl::OkStatus();
  }
  // The engine takes the state over; spec.prefilled stays set (emptied) to mark the request as
  // prefilled elsewhere.
  PrefilledState* prefilled = request.spec.prefilled.get();
  const int64_t prompt = static_cast<int64_t>(spec.prompt.size());
  if (!prefilled->sequence || prefilled->sequence->num_tokens() != prompt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefilled state holds ", prefilled->sequence ? prefilled->sequence->num_tokens() : 0,
        " tokens, the prompt has ", prompt));
  }
  request.state = std::move(prefilled->sequence);
  if (drafter_ == nullptr) return absl::OkStatus();
  if (!prefilled->drafter) {
    return absl::FailedPreconditionError(
        "prefilled request arrived without the DSpark drafter context this decode worker "
        "speculates with (the prefill worker must run the drafter)");
  }
  if (prefilled->drafter->num_positions() != prompt) {
    return absl::InvalidArgumentError(absl::StrCat("prefilled drafter context holds ",
                                                   prefilled->drafter->num_positions(),
                                                   " positions, the prompt has ", prompt));
  }
  request.drafter_state = std::move(prefilled->drafter);
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<dspark::DrafterState>> ModelRunner::NewRing() const {
  if (drafter_ == nullptr) return std::unique_ptr<dspark::DrafterState>();
  return drafter_->NewState(model_.kv_pool());
}

StatusOr<std::shared_ptr<PrefilledState>> ModelRunner::Restore(
    std::string_view state, std::string_view drafter_state) const {
  auto prefilled = std::make_shared<PrefilledState>();
  prefilled->sequence = model_.NewSequence();
  RETURN_IF_ERROR(prefilled->sequence->Restore(state));
  if (!drafter_state.empty() && drafter_ != nullptr) {
    ASSIGN_OR_RETURN(prefilled->drafter, NewRing());
    RETURN_IF_ERROR(prefilled->drafter->Restore(drafter_state));
  }
  return prefilled;
}

bool ModelRunner::WantsAllLogits(const ActiveRequest& request) {
  const int64_t prompt = static_cast<int64_t>(request.spec.prompt.size());
  // Position p's row gives prompt token p + 1's logprob: rows up to position prompt - 2.
  const bool prompt_logprobs = request.spec.sampling.prompt_logprobs >= 0 &&
                               !request.spec.prefilled && request.fed() < prompt - 1;
  return !request.draft.empty() || prompt_logprobs;
}

void ModelRunner::ReleaseCachedMemory() const {
  for (const auto& backend : model_.backends()) backend->ReleaseCachedMemory();
}

StatusOr<StepResult> ModelRunner::Run(const std::vector<ActiveRequest*>& planned, bool argmax_only,
                                      std::span<engine::StepInput> inputs,
                                      std::span<const std::vector<kernels::GumbelRow>> draws) {
  StepResult result;
  // Only the requests that verify drafts or want prompt logprobs pay for every row's head.
  for (size_t i = 0; i < planned.size(); ++i) inputs[i].all_logits = WantsAllLogits(*planned[i]);
  engine::StepOptions options;
  options.logits = engine::LogitsMode::kLastTokenPerSequence;
  options.argmax_only = argmax_only;
  if (argmax_only && !draws.empty()) {
    // One draw per logits row: a request's draws are its last rows' (any rows before: greedy).
    for (size_t i = 0; i < planned.size(); ++i) {
      const int64_t rows =
          engine::BatchLayout::LogitRows({.count = static_cast<int64_t>(inputs[i].tokens.size()),
                                          .all_logits = inputs[i].all_logits});
      const int64_t drawn = static_cast<int64_t>(draws[i].size());
      for (int64_t k = 0; k < rows; ++k) {
        const int64_t d = k - (rows - drawn);
        options.sample.push_back(d >= 0 ? draws[i][d] : kernels::GumbelRow{});
      }
    }
  }
  // Every fed position's drafter context comes from this step's target features.
  options.features = drafter_ != nullptr;
  // Prefill workers ship each layer's new cache rows as soon as the layer is done.
  std::vector<const ActiveRequest*> observed;
  for (const ActiveRequest* r : planned) {
    if (r->spec.state_observer) observed.push_back(r);
  }
  if (!observed.empty()) {
    options.on_layer_done = [&observed](int64_t layer) {
      for (const ActiveRequest* r : observed) r->spec.state_observer->OnLayerDone(*r->state, layer);
    };
  }
  timer_->Start();
  ASSIGN_OR_RETURN(result.output, model_.Step(inputs, options));
  result.seconds = timer_->Stop();
  return result;
}

}  // namespace pdspark::serving
