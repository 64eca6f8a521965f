// What the serving engine is asked to do for one request, and what it reports back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampling/sampling_params.h"
#include "engine/sampling/stop_conditions.h"

namespace pdspark::serving {

using Clock = std::chrono::steady_clock;

struct RequestSpec {
  std::string id;
  std::vector<int32_t> prompt;
  sampling::SamplingParams sampling;
  Clock::time_point deadline = Clock::time_point::max();
  // Prefill worker mode: stop after the first token and hand back the serialised state.
  bool prefill_only = false;
  // Continue from state prefilled elsewhere (disaggregated decode): the SequenceState bytes of
  // the prompt plus the first token, which was sampled by the prefill side.
  std::string prefilled_state;
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
  int64_t drafts = 0;          // verify rounds
  int64_t draft_tokens = 0;    // draft tokens verified
  int64_t accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position;  // [k]: rounds whose draft k+1 was accepted
  std::vector<int64_t> verify_lengths;         // [n]: rounds that verified n draft tokens
};

// One report to the request's sink: new tokens, and on the last report how it ended.
struct RequestEvent {
  std::vector<int32_t> tokens;
  Outcome outcome = Outcome::kRunning;
  sampling::FinishReason finish_reason = sampling::FinishReason::kNone;
  std::string error;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  SpecStats spec;
  std::string state;  // prefill_only: the serialised SequenceState after the prompt
};

// Called on the engine thread; must not block for long (hand work to another thread).
using RequestSink = std::function<void(const RequestEvent&)>;

}  // namespace pdspark::serving
