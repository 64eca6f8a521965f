// Continuous batching over one Model: requests join and leave between steps; every step runs
// one forward over all running requests (prefill chunks and single decode tokens together),
// samples each request's next token with its own seeded sampler, and streams it to the
// request's sink. Both the prefill worker (prefill_only requests) and the decode worker run
// one of these.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/base/status.h"
#include "common/metrics/cumulative_histogram.h"
#include "engine/dspark/confidence_calibration.h"
#include "engine/dspark/drafter.h"
#include "engine/dspark/verify_scheduler.h"
#include "engine/model/model.h"
#include "engine/serving/cache_ledger.h"
#include "engine/serving/drafting_guard.h"
#include "engine/serving/request.h"
#include "engine/serving/spec_cost_model.h"

namespace pdspark::serving {

struct ServingOptions {
  int64_t max_num_seqs = 64;       // running requests at once
  int64_t max_batch_tokens = 512;  // tokens per step across requests (chunked prefill budget)
  int64_t max_model_len = 0;       // 0 = the config's max_position_embeddings
  int64_t max_waiting = 1024;      // admitted but not yet running
  // DSpark speculative decoding: with a drafter and spec_tokens >= 1, every decode-phase
  // request drafts min(spec_tokens, block_size) tokens per round and all rounds are verified in
  // the step's one batched forward. The model must export the drafter's feature layers (the
  // default ModelOptions do for a DSpark checkpoint).
  std::shared_ptr<const dspark::Drafter> drafter;
  int64_t spec_tokens = 0;  // 0 = off
  // Confidence-scheduled speculation (`--spec-tokens auto`, dspark_dsv4.md B.4; docs/dspark.md):
  // each step decides from predicted survivals and the measured costs of the drafter and the
  // target whether to draft, for which requests and how many slots, then picks every drafting
  // request's verify prefix from its calibrated confidences (Algorithm 1 with early stop).
  // Prefixes whose survival is below spec_auto_min_survival are never verified.
  bool spec_auto = false;
  double spec_auto_min_survival = 0.05;
  // Draft only when that is predicted to beat a plain step by this factor (hysteresis against
  // drafting on a gain within the cost model's error).
  double spec_auto_min_speedup = 1.03;
  // The costs auto schedules with; unset: measured at startup (SpecCostModel::Measure). Tests
  // give fixed ones to exercise the schedule independently of machine timing, e.g.
  // SpecCostModel::Unprofiled(): every step costs the same and drafting is free, so every
  // candidate drafts and verifies whatever clears the survival floor.
  std::optional<SpecCostModel> spec_auto_costs;
};

struct ServingStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t cache_bytes_in_use = 0;
  int64_t cache_blocks_in_use = 0;
  int64_t steps = 0;
  int64_t generated_tokens = 0;
  SpecStats spec;  // all requests' speculative rounds since start

  // Cache accounting for the metrics (docs/metrics.md): bytes held per cache group (the DSpark
  // context rings as "drafter"), the KV pool's size and the most it ever held, and the
  // worst-case bytes reserved by admitted requests, which is what makes new requests wait.
  std::map<std::string, int64_t> cache_bytes_by_group;
  int64_t cache_capacity_bytes = 0;
  int64_t cache_high_water_bytes = 0;
  int64_t cache_bytes_reserved = 0;
  // Every step (drafting, the forward, sampling): its wall time and the sequences in it.
  metrics::CumulativeHistogram step_seconds{metrics::LatencyBuckets()};
  metrics::CumulativeHistogram batch_size{metrics::CountBuckets()};
  // Requests whose prompt this engine computed: submission to first token, and the tokens.
  metrics::CumulativeHistogram prefill_seconds{metrics::LatencyBuckets()};
  int64_t prompt_tokens = 0;
  // auto: the current STS temperatures of greedy requests' confidences (per draft slot).
  std::vector<double> spec_temperatures;
};

class ServingEngine {
 public:
  ServingEngine(std::unique_ptr<engine::Model> model, const ServingOptions& options);
  ~ServingEngine();  // cancels what is left and joins the loop

  // Queues a request. Fails fast (InvalidArgument / ResourceExhausted / AlreadyExists)
  // without calling the sink; otherwise the sink gets every event up to a final one.
  Status Submit(RequestSpec spec, RequestSink sink);
  // Cancels a queued or running request; its sink gets a final kCancelled event.
  bool Cancel(const std::string& id);
  // Whether the request waits in the queue (for cache, or for a batch slot).
  bool IsQueued(const std::string& id) const;
  ServingStats Stats() const;
  // Worst-case cache bytes of a sequence of `tokens` tokens (a drafting one also holds a DSpark
  // context ring): what admission reserves of the model's KV pool (--kv-cache-memory-bytes).
  int64_t CacheBytesFor(int64_t tokens, bool drafting) const;
  // A lease of the KV pool for a request of `prompt_tokens` that will generate up to
  // `max_tokens`, taken when a decode worker reserves a KV transfer (thread-safe). The request
  // brings it in PrefilledState::lease; ResourceExhausted when the pool is fully leased.
  StatusOr<CacheLease> ReserveCache(int64_t prompt_tokens, int64_t max_tokens) const;
  // Fails (naming the flags) when the KV pool cannot hold one request of the maximum model
  // length, which would otherwise be refused at Submit; workers check it at startup.
  Status CheckCacheBudget() const;

  const engine::Model& model() const { return *model_; }
  int64_t max_model_len() const { return max_model_len_; }

  // Disaggregated decode: empty states to restore a transferred request into, off the engine
  // thread (thread-safe). NewDrafterState is null when this engine does not speculate; when it
  // does, a prefilled request must bring the DSpark context ring of its prompt.
  std::unique_ptr<engine::SequenceState> NewSequence() { return model_->NewSequence(); }
  StatusOr<std::unique_ptr<dspark::DrafterState>> NewDrafterState() const;
  // Serialised size of the DSpark context ring a prefilled request brings; 0 when this engine
  // does not speculate.
  uint64_t DrafterStateWireBytes() const {
    return SpecEnabled() ? options_.drafter->StateWireBytes() : 0;
  }
  // The PrefilledState for bytes of a prefill_only request's final event (state, and
  // drafter_state which may be empty).
  StatusOr<std::shared_ptr<PrefilledState>> RestorePrefilled(std::string_view state,
                                                             std::string_view drafter_state);

 private:
  struct Active;
  void Loop();
  void AdmitLocked();
  std::vector<Active*> PlanStep(std::vector<engine::StepInput>& inputs,
                                std::vector<std::vector<int32_t>>& chunks);
  void RunStep();
  void AfterStep(Active& request, const float* logits, bool logits_valid);
  bool SpecEnabled() const {
    return options_.drafter != nullptr && (options_.spec_tokens > 0 || options_.spec_auto);
  }
  dspark::StepBase BaseOfStep() const;
  dspark::ConfidenceCalibration& Calibration(const Active& request);
  void ChooseDrafting(const std::vector<Active*>& candidates, const std::vector<int64_t>& caps,
                      std::vector<Active*>& drafting, std::vector<int64_t>& gammas);
  void ScheduleVerifyLengths(const std::vector<Active*>& drafting,
                             const std::vector<dspark::DraftOutput>& drafts);
  int64_t DraftLength(const Active& request) const;
  // The DSpark context ring with lazily appended positions (see CatchUpRing).
  int64_t FeatureWidth() const;
  int64_t RingPositions(const Active& request) const;
  void CatchUpRing(Active& request) const;
  Status TruncateRing(Active& request, int64_t positions) const;
  // Drafts for this step's speculating requests; whether the drafter ran.
  bool DraftAll();
  void AfterVerify(Active& request, const float* logits);
  void Emit(Active& request, std::vector<int32_t> emitted, sampling::FinishReason reason);
  void Finish(Active& request, Outcome outcome, sampling::FinishReason reason, std::string error);
  void MarkDone(Active& request);
  void ReapFinished();
  int64_t CacheReservation(const RequestSpec& spec) const;
  int64_t CacheBytesForRequest(int64_t prompt_tokens, int64_t max_tokens, bool prefill_only) const;
  // Leases the request's worst case, adopting the lease a prefilled request brings; false when
  // the pool cannot hold it yet.
  bool LeaseCache(Active& request);
  int64_t cache_budget_bytes() const { return model_->kv_pool().capacity_bytes(); }
  void UpdateCacheStatsLocked();
  Status StartRequest(Active& request);
  Status AdoptPrefilledState(Active& request);

  std::unique_ptr<engine::Model> model_;
  const ServingOptions options_;
  std::shared_ptr<CacheLedger> ledger_;  // of model_'s KV pool
  const int64_t max_model_len_;
  std::vector<int32_t> eos_ids_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::deque<std::unique_ptr<Active>> waiting_;
  std::vector<std::string> cancel_requests_;
  std::map<std::string, bool> known_ids_;  // queued or running
  ServingStats stats_;

  // Owned by the loop thread.
  std::vector<std::unique_ptr<Active>> running_;
  int64_t drafter_state_bytes_ = 0;  // one request's DSpark context ring, in pool pages
  // auto (owned by the loop thread too).
  SpecCostModel spec_costs_;
  // The backend's clocks: a whole decode step (the drafting guard), and one model call in it
  // (the cost model's observations).
  std::unique_ptr<engine::backend::Timer> step_timer_, call_timer_;
  DraftingGuard drafting_guard_;
  std::vector<dspark::ConfidenceCalibration> calibration_;  // [0] greedy, [1] sampled requests
  std::vector<std::vector<double>> prior_survival_;         // same index: for requests without
                                                            // rounds of their own yet
  int64_t auto_idle_steps_ = 0;                             // steps since the last draft
  int64_t auto_probe_gap_ = 0;    // idle steps before the next probe draft
  size_t auto_probe_cursor_ = 0;  // round-robin over candidates for probes
  std::thread loop_;
};

}  // namespace pdspark::serving
