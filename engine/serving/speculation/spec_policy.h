// The DSpark policy of one serving engine: which running requests draft this step and how many
// tokens (fixed `--spec-tokens N`, or `auto`'s confidence schedule over the measured costs and
// the DraftingGuard), the batched drafter forward, how each drafting request's verify prefix is
// chosen, what a verify round teaches the calibration, and the lazily appended context ring
// (PendingContext). The engine's scheduler and output processor call it; it never runs the
// target model itself. See docs/dspark.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/dspark/confidence_calibration.h"
#include "engine/dspark/drafter.h"
#include "engine/dspark/verify_scheduler.h"
#include "engine/model/model.h"
#include "engine/serving/active_request.h"
#include "engine/serving/serving_options.h"
#include "engine/serving/speculation/drafting_guard.h"
#include "engine/serving/speculation/spec_cost_model.h"

namespace pdspark::serving {

using RunningRequests = std::vector<std::unique_ptr<ActiveRequest>>;

class SpecPolicy {
 public:
  // Measures auto's cost profile on `model` unless the options bring one.
  SpecPolicy(const ServingOptions& options, engine::Model& model, std::vector<int32_t> eos_ids,
             int64_t max_model_len);

  // A drafter and a draft length (N or auto) are configured.
  bool enabled() const {
    return options_.drafter != nullptr && (options_.spec_tokens > 0 || options_.spec_auto);
  }
  bool auto_schedule() const { return options_.spec_auto; }

  // Drafts for this step's speculating requests (their `draft`, and under auto their verify
  // prefix); whether the drafter ran.
  bool DraftAll(const RunningRequests& running);

  // auto: a plain decode step of the target (for the cost model), and the realized outcome of a
  // decode step, drafted or not (for the DraftingGuard).
  void ObserveTarget(int64_t sequences, int64_t rows, double seconds);
  void ObserveDecodeStep(int64_t sequences, bool drafted, double committed, double seconds);
  // auto: a verify round of `request` that accepted `accepted` of `gamma` drafts; the greedy
  // calibration's temperatures when this round updated them.
  std::optional<std::vector<double>> ObserveVerify(const ActiveRequest& request, int64_t gamma,
                                                   int64_t accepted);

  // The context ring with lazily appended positions: features per position, the positions it
  // covers (appended + pending), appending what is pending, and rolling back.
  int64_t FeatureWidth() const;
  int64_t RingPositions(const ActiveRequest& request) const;
  void CatchUpRing(ActiveRequest& request) const;
  Status TruncateRing(ActiveRequest& request, int64_t positions) const;

 private:
  int64_t DraftLength(const ActiveRequest& request) const;
  dspark::StepBase BaseOfStep(const RunningRequests& running) const;
  dspark::ConfidenceCalibration& Calibration(const ActiveRequest& request);
  void ChooseDrafting(const RunningRequests& running, const std::vector<ActiveRequest*>& candidates,
                      const std::vector<int64_t>& caps, std::vector<ActiveRequest*>& drafting,
                      std::vector<int64_t>& gammas);
  void ScheduleVerifyLengths(const RunningRequests& running,
                             const std::vector<ActiveRequest*>& drafting,
                             const std::vector<dspark::DraftOutput>& drafts);

  const ServingOptions options_;
  const engine::Model& model_;
  const std::vector<int32_t> eos_ids_;
  const int64_t max_model_len_;
  SpecCostModel costs_;
  std::unique_ptr<engine::backend::Timer> draft_timer_;  // one drafter forward
  DraftingGuard guard_;
  std::vector<dspark::ConfidenceCalibration> calibration_;  // [0] greedy, [1] sampled requests
  std::vector<std::vector<double>> prior_survival_;  // same index: for requests without rounds
  int64_t idle_steps_ = 0;                           // steps since the last draft
  int64_t probe_gap_ = 0;                            // idle steps before the next probe draft
  size_t probe_cursor_ = 0;                          // round-robin over candidates for probes
};

}  // namespace pdspark::serving
