// What the serving engine is asked to do for one request, and what it reports back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cache/sequence_state.h"
#include "engine/dspark/drafter_state.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampling_params.h"
#include "engine/sampling/stop_conditions.h"
#include "engine/serving/cache_ledger.h"

namespace pdspark::serving {

using Clock = std::chrono::steady_clock;

// Watches a prefill_only request's state while it is built, so that a prefill worker can ship
// each layer's new cache rows, straight from their pages, while later layers still compute.
// Called on the engine thread: must not block.
class StateObserver {
 public:
  virtual ~StateObserver() = default;
  // Layer `layer` appended this step's rows of the request to its cache groups.
  virtual void OnLayerDone(const engine::SequenceState& state, int64_t layer) = 0;
  // The prompt is in the state and the first token sampled; `drafter` is the DSpark context
  // ring of the prompt, or null when the engine runs no drafter.
  virtual void OnPrefilled(const engine::SequenceState& state,
                           const dspark::DrafterState* drafter) = 0;
  // The request is over (finished, failed or cancelled). Its state's pages, and the pool lease
  // that covers them, are the observer's until it drops them: puts still in flight read them.
  virtual void OnRelease(std::unique_ptr<engine::SequenceState> state, CacheLease lease) = 0;
};

// State prefilled elsewhere, already restored (off the engine thread) for the decode side.
struct PrefilledState {
  std::unique_ptr<engine::SequenceState> sequence;  // the prompt's tokens
  std::unique_ptr<dspark::DrafterState> drafter;    // null when none was shipped
  // The KV pool lease the decode worker took when it reserved the transfer
  // (ServingEngine::ReserveCache); admission adopts it instead of leasing again.
  CacheLease lease;
};

struct RequestSpec {
  std::string id;
  std::vector<int32_t> prompt;
  sampling::SamplingParams sampling;
  Clock::time_point deadline = Clock::time_point::max();
  // Prefill worker mode: stop after the first token and hand back the state, through
  // `state_observer` when set, else serialised in the final event.
  bool prefill_only = false;
  std::shared_ptr<StateObserver> state_observer;
  // With a state_observer that ships rows from the pages: per cache group (layer-major, in
  // CacheLayout order) the first row the sequence keeps however far its window moves (the decode
  // worker's first retained row, engine/cache/staging_layout.h), and the tokens that may add
  // to a group's window (the decode worker's block size), which the request's lease covers.
  std::vector<int64_t> keep_rows_from;
  int64_t kept_extra_tokens = 0;
  // Continue from state prefilled elsewhere (disaggregated decode); `generated` then starts
  // with the first token, which the prefill side sampled. The engine moves the state out
  // (the pointer stays set: the request was prefilled elsewhere).
  std::shared_ptr<PrefilledState> prefilled;
  std::vector<int32_t> generated;  // tokens already produced (first token; failover replay)
};

enum class Outcome {
  kRunning,
  kFinished,   // stop or length: see finish_reason
  kCancelled,  // Cancel() or engine shutdown
  kFailed,     // error, including a passed deadline: see error
};

// DSpark speculative decoding counters (dspark_dsv4.md B.6): acceptance length
// tau = 1 + accepted_tokens / drafts; the bonus/correction token is not counted as accepted.
struct SpecStats {
  int64_t drafts = 0;        // verify rounds
  int64_t draft_tokens = 0;  // draft tokens verified
  int64_t accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position;  // [k]: rounds whose draft k+1 was accepted
  std::vector<int64_t> verify_lengths;         // [n]: rounds that verified n draft tokens

  // Counts one round that verified `gamma` drafts and accepted the first `accepted`.
  void AddRound(int64_t gamma, int64_t accepted) {
    ++drafts;
    draft_tokens += gamma;
    accepted_tokens += accepted;
    if (static_cast<int64_t>(accepted_per_position.size()) < gamma) {
      accepted_per_position.resize(gamma, 0);
    }
    for (int64_t k = 0; k < accepted; ++k) ++accepted_per_position[k];
    if (static_cast<int64_t>(verify_lengths.size()) <= gamma) verify_lengths.resize(gamma + 1, 0);
    ++verify_lengths[gamma];
  }
};

// One report to the request's sink: new tokens, and on the last report how it ended.
struct RequestEvent {
  std::vector<int32_t> tokens;
  // With sampling.logprobs >= 0: one per token of `tokens`.
  std::vector<sampling::TokenLogprob> logprobs;
  // With sampling.prompt_logprobs >= 0, on the event of the first token: prompt tokens 1..n-1
  // (the first has none). Empty when the prompt was prefilled elsewhere.
  std::vector<sampling::TokenLogprob> prompt_logprobs;
  Outcome outcome = Outcome::kRunning;
  sampling::FinishReason finish_reason = sampling::FinishReason::kNone;
  std::string error;
  int64_t prompt_tokens = 0;
  // Prompt tokens reused from the prefix cache instead of computed (final event).
  int64_t cached_tokens = 0;
  int64_t generated_tokens = 0;
  SpecStats spec;
  // prefill_only without an observer: SequenceState::Serialize() after the prompt, and the
  // DSpark context ring's DrafterState::Serialize() when the engine runs a drafter.
  std::string state;
  std::string drafter_state;
};

// Called on the engine thread; must not block for long (hand work to another thread).
using RequestSink = std::function<void(const RequestEvent&)>;

}  // namespace pdspark::serving
