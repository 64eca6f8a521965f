// Continuous batching over one Model: requests join and leave between steps; every step runs
// one forward over all running requests (prefill chunks, single decode tokens and DSpark verify
// rounds together), samples each request's next token with its own seeded sampler, and streams
// it to the request's sink. Both the prefill worker (prefill_only requests) and the decode
// worker run one of these.
//
// The engine core (this file) owns the request queue, the loop thread and the events; the work
// is split as vLLM v1 splits it: Scheduler (admission and the step plan), ModelRunner (states
// and the forward), OutputProcessor (sampling, acceptance, stop conditions), and the DSpark
// policy in engine/serving/speculation/.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/base/status.h"
#include "common/metrics/cumulative_histogram.h"
#include "engine/model/model.h"
#include "engine/serving/active_request.h"
#include "engine/serving/cache_ledger.h"
#include "engine/serving/model_runner.h"
#include "engine/serving/output_processor.h"
#include "engine/serving/prefix_cache.h"
#include "engine/serving/request.h"
#include "engine/serving/scheduler.h"
#include "engine/serving/serving_options.h"
#include "engine/serving/speculation/spec_policy.h"

namespace pdspark::serving {

struct ServingStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t cache_bytes_in_use = 0;
  int64_t cache_blocks_in_use = 0;
  int64_t steps = 0;
  int64_t argmax_steps = 0;  // of those, steps that took argmax ids (argmax_on_device)
  int64_t generated_tokens = 0;
  SpecStats spec;  // all requests' speculative rounds since start

  // Cache accounting for the metrics (docs/metrics.md): bytes held per cache group (the DSpark
  // context rings as "drafter"), the KV pool's size and the most it ever held, and the
  // worst-case bytes reserved by admitted requests, which is what makes new requests wait.
  std::map<std::string, int64_t> cache_bytes_by_group;
  int64_t cache_capacity_bytes = 0;
  int64_t cache_high_water_bytes = 0;
  // What a token of context costs in the KV groups attention reads (--kv-cache-dtype).
  double kv_bytes_per_token = 0;
  int64_t cache_bytes_reserved = 0;
  // Every step (drafting, the forward, sampling): its wall time and the sequences in it.
  metrics::CumulativeHistogram step_seconds{metrics::LatencyBuckets()};
  metrics::CumulativeHistogram batch_size{metrics::CountBuckets()};
  // Requests whose prompt this engine computed: submission to first token, and the tokens.
  metrics::CumulativeHistogram prefill_seconds{metrics::LatencyBuckets()};
  int64_t prompt_tokens = 0;
  // auto: the current STS temperatures of greedy requests' confidences (per draft slot).
  std::vector<double> spec_temperatures;
  // Prefix caching (ServingOptions::enable_prefix_caching); pages only the cache holds are
  // counted free in cache_bytes_in_use (they are reclaimed on demand), and in
  // prefix_cache_bytes.
  bool prefix_caching = false;
  PrefixCacheStats prefix_cache;
  int64_t prefix_cache_bytes = 0;
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
  // The prefix cache's entries for the router (version 0 and none when caching is off).
  PrefixCache::Published CachedPrefixes() const;
  // Disaggregated decode: the longest cached prefix of a prompt about to arrive by KV transfer
  // (shorter than it, without a DSpark ring: the transfer brings the prompt's), so that only
  // the rest travels (thread-safe). A miss when caching is off.
  PrefixHit CachedPrefix(std::span<const int32_t> prompt);
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
    return spec_.enabled() ? options_.drafter->StateWireBytes() : 0;
  }
  // The PrefilledState for bytes of a prefill_only request's final event (state, and
  // drafter_state which may be empty).
  StatusOr<std::shared_ptr<PrefilledState>> RestorePrefilled(std::string_view state,
                                                             std::string_view drafter_state);

 private:
  void Loop();
  void RunStep();
  // Request i of `step` after a plain step (its next token) or a verify round.
  void AfterStep(ActiveRequest& request, const StepResult& step, size_t i);
  void AfterVerify(ActiveRequest& request, const StepResult& step, size_t i);
  void Emit(ActiveRequest& request, Emission emission);
  void Finish(ActiveRequest& request, Outcome outcome, sampling::FinishReason reason,
              std::string error);
  void MarkDone(ActiveRequest& request);
  void ReapFinished();
  void FillCacheStats(ServingStats& stats) const;
  Status StartRequest(ActiveRequest& request);
  // Prefix caching: a new request takes the longest cached prefix of its tokens and learns
  // where to end a step for a branch point; states are stored when a prompt is in, at branch
  // points and when a request finishes.
  bool WaitsForASharedPrompt(const ActiveRequest& request) const;
  void ReusePrefix(ActiveRequest& request);
  void StorePrefixAtStepEnd(ActiveRequest& request);
  void StorePrefix(ActiveRequest& request);

  std::unique_ptr<engine::Model> model_;
  const ServingOptions options_;
  const int64_t max_model_len_;
  const std::vector<int32_t> eos_ids_;
  // The engine's parts (vLLM v1's split): the DSpark policy, the model runner (the model, the
  // requests' states in its KV pool, one step), the scheduler (admission on KV pool leases, the
  // step's token budget) and the output processor (sampling, acceptance, stop conditions). The
  // loop thread runs them; the scheduler's leases and the runner's new states are thread-safe.
  SpecPolicy spec_;
  ModelRunner runner_;
  Scheduler scheduler_;
  OutputProcessor output_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when caching is off

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::deque<std::unique_ptr<ActiveRequest>> waiting_;
  std::vector<std::string> cancel_requests_;
  std::map<std::string, bool> known_ids_;  // queued or running
  ServingStats stats_;

  // Owned by the loop thread.
  std::vector<std::unique_ptr<ActiveRequest>> running_;
  // A whole decode step on the backend's clock (the drafting guard).
  std::unique_ptr<engine::backend::Timer> step_timer_;
  std::thread loop_;
};

}  // namespace pdspark::serving
