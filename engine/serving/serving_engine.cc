#include "engine/serving/serving_engine.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine/sampling/sampler.h"

namespace pdspark::serving {

// A request from admission to its final event. `tokens` is prompt + generated; the sequence
// state holds the first state->num_tokens() of them, so prefill chunks, decode steps and
// failover replays are all "feed the tokens the state does not have yet".
struct ServingEngine::Active {
  RequestSpec spec;
  RequestSink sink;
  std::optional<sampling::Sampler> sampler;
  std::unique_ptr<engine::SequenceState> state;
  std::vector<int32_t> tokens;
  int64_t generated = 0;
  bool started = false;
  bool done = false;
  SpecStats spec_stats;

  int64_t fed() const { return state ? state->num_tokens() : 0; }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - fed(); }
};

ServingEngine::ServingEngine(std::unique_ptr<engine::Model> model, const ServingOptions& options)
    : model_(std::move(model)),
      options_(options),
      max_model_len_(options.max_model_len > 0 ? options.max_model_len
                                               : model_->config().max_position_embeddings) {
  for (int64_t id : model_->config().eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(id));
  if (eos_ids_.empty()) eos_ids_.push_back(static_cast<int32_t>(model_->config().eos_token_id));
  loop_ = std::thread([this] { Loop(); });
}

ServingEngine::~ServingEngine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  loop_.join();
  for (auto& request : waiting_) {
    Finish(*request, Outcome::kCancelled, sampling::FinishReason::kNone, "engine shut down");
  }
  for (auto& request : running_) {
    if (!request->done) {
      Finish(*request, Outcome::kCancelled, sampling::FinishReason::kNone, "engine shut down");
    }
  }
}

Status ServingEngine::Submit(RequestSpec spec, RequestSink sink) {
  RETURN_IF_ERROR(spec.sampling.Validate());
  if (spec.prompt.empty()) return absl::InvalidArgumentError("prompt must not be empty");
  const int64_t vocab = model_->config().vocab_size;
  for (int32_t id : spec.prompt) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token id ", id, " outside the vocabulary [0, ", vocab, ")"));
    }
  }
  const int64_t context = static_cast<int64_t>(spec.prompt.size() + spec.generated.size());
  if (context >= max_model_len_) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", context,
                                                   " tokens does not fit the maximum model length ",
                                                   max_model_len_, " with room to generate"));
  }
  if (!spec.prefilled_state.empty() && spec.generated.empty()) {
    return absl::InvalidArgumentError("a prefilled request needs its first token");
  }
  auto request = std::make_unique<Active>();
  request->spec = std::move(spec);
  request->sink = std::move(sink);
  {
    std::lock_guard lock(mu_);
    if (stop_) return absl::UnavailableError("serving engine is shutting down");
    if (known_ids_.contains(request->spec.id)) {
      return absl::AlreadyExistsError(absl::StrCat("request ", request->spec.id, " exists"));
    }
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting) {
      return absl::ResourceExhaustedError(
          absl::StrCat("waiting queue full (", options_.max_waiting, " requests)"));
    }
    known_ids_[request->spec.id] = true;
    waiting_.push_back(std::move(request));
    stats_.waiting = static_cast<int64_t>(waiting_.size());
  }
  wake_.notify_all();
  return absl::OkStatus();
}

bool ServingEngine::Cancel(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    if (!known_ids_.contains(id)) return false;
    cancel_requests_.push_back(id);
  }
  wake_.notify_all();
  return true;
}

ServingStats ServingEngine::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void ServingEngine::Loop() {
  while (true) {
    std::vector<std::string> cancels;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stop_ || !waiting_.empty() || !running_.empty() || !cancel_requests_.empty();
      });
      if (stop_) return;
      cancels.swap(cancel_requests_);
      for (const std::string& id : cancels) {
        auto it = std::find_if(waiting_.begin(), waiting_.end(),
                               [&](const auto& r) { return r->spec.id == id; });
        if (it == waiting_.end()) continue;
        running_.push_back(std::move(*it));  // finished below like a running one
        waiting_.erase(it);
      }
      AdmitLocked();
    }
    const auto now = Clock::now();
    for (auto& request : running_) {
      if (request->done) continue;
      if (std::find(cancels.begin(), cancels.end(), request->spec.id) != cancels.end()) {
        Finish(*request, Outcome::kCancelled, sampling::FinishReason::kNone, "cancelled");
      } else if (now >= request->spec.deadline) {
        Finish(*request, Outcome::kFailed, sampling::FinishReason::kNone,
               "deadline exceeded before the request finished");
      } else if (!request->started) {
        request->started = true;
        Status st = StartRequest(*request);
        if (!st.ok()) {
          Finish(*request, Outcome::kFailed, sampling::FinishReason::kNone,
                 std::string(st.message()));
        }
      }
    }
    RunStep();
    ReapFinished();
  }
}

void ServingEngine::AdmitLocked() {
  int64_t active = 0;
  for (const auto& r : running_) active += r->done ? 0 : 1;
  while (!waiting_.empty() && active < options_.max_num_seqs) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    ++active;
  }
  stats_.waiting = static_cast<int64_t>(waiting_.size());
}

Status ServingEngine::StartRequest(Active& request) {
  const RequestSpec& spec = request.spec;
  ASSIGN_OR_RETURN(auto sampler, sampling::Sampler::Create(spec.sampling));
  request.sampler.emplace(std::move(sampler));
  // Replaying already generated tokens (disaggregated first token, failover) must leave the
  // request's RNG where a colocated run would have it: one draw per sampled token.
  if (!request.sampler->greedy()) {
    for (size_t i = 0; i < spec.generated.size(); ++i) request.sampler->Uniform();
  }
  request.state = model_->NewSequence();
  if (!spec.prefilled_state.empty()) {
    RETURN_IF_ERROR(request.state->Restore(spec.prefilled_state));
    if (request.state->num_tokens() != static_cast<int64_t>(spec.prompt.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prefilled state holds ", request.state->num_tokens(), " tokens, the prompt has ",
          spec.prompt.size()));
    }
  }
  request.tokens = spec.prompt;
  request.tokens.insert(request.tokens.end(), spec.generated.begin(), spec.generated.end());
  request.generated = static_cast<int64_t>(spec.generated.size());
  if (!spec.generated.empty()) {
    // The first token may already end the request (EOS, max_tokens = 1).
    std::vector<int32_t> last(spec.generated.end() - 1, spec.generated.end());
    const auto reason = sampling::ApplyStopConditions(spec.sampling, eos_ids_,
                                                      request.generated - 1, &last);
    if (reason != sampling::FinishReason::kNone) {
      Finish(request, Outcome::kFinished, reason, "");
    }
  }
  return absl::OkStatus();
}

std::vector<ServingEngine::Active*> ServingEngine::PlanStep(
    std::vector<engine::StepInput>& inputs, std::vector<std::vector<int32_t>>& chunks) {
  std::vector<Active*> planned;
  int64_t budget = options_.max_batch_tokens;
  // Decode tokens first (one each) so running requests keep their pace; prefill chunks take
  // what is left of the token budget, but at least one chunk always makes progress.
  std::vector<Active*> order;
  for (auto& r : running_) {
    if (!r->done && r->started && r->pending() == 1) order.push_back(r.get());
  }
  for (auto& r : running_) {
    if (!r->done && r->started && r->pending() > 1) order.push_back(r.get());
  }
  for (Active* r : order) {
    const int64_t take = std::min(r->pending(), std::max<int64_t>(budget, planned.empty() ? 1 : 0));
    if (take <= 0) break;
    budget -= take;
    chunks.emplace_back(r->tokens.begin() + r->fed(), r->tokens.begin() + r->fed() + take);
    planned.push_back(r);
  }
  for (size_t i = 0; i < planned.size(); ++i) inputs.push_back({planned[i]->state.get(), chunks[i]});
  return planned;
}

void ServingEngine::RunStep() {
  std::vector<engine::StepInput> inputs;
  std::vector<std::vector<int32_t>> chunks;
  chunks.reserve(running_.size());
  std::vector<Active*> planned = PlanStep(inputs, chunks);
  if (planned.empty()) return;
  engine::StepOptions step_options;
  step_options.logits = engine::LogitsMode::kLastTokenPerSequence;
  auto output = model_->Step(inputs, step_options);
  if (!output.ok()) {
    LOG_ERROR("engine step failed sequences={} error={}", planned.size(),
              output.status().ToString());
    for (Active* r : planned) {
      Finish(*r, Outcome::kFailed, sampling::FinishReason::kNone,
             std::string(output.status().message()));
    }
    return;
  }
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < planned.size(); ++i) {
    AfterStep(*planned[i], output->logits.data() + i * vocab, true);
  }
  std::lock_guard lock(mu_);
  ++stats_.steps;
}

void ServingEngine::AfterStep(Active& request, const float* logits_row, bool /*logits_valid*/) {
  if (request.pending() > 0) return;  // prefill chunk that did not reach the end yet
  const int64_t vocab = model_->config().vocab_size;
  std::vector<float> logits(logits_row, logits_row + vocab);
  sampling::SuppressStopTokens(request.spec.sampling, eos_ids_,
                               static_cast<int32_t>(request.generated), logits);
  const int32_t token = request.sampler->SampleFromLogits(logits);
  std::vector<int32_t> emitted{token};
  auto reason = sampling::ApplyStopConditions(request.spec.sampling, eos_ids_,
                                              static_cast<int32_t>(request.generated), &emitted);
  const int64_t context = static_cast<int64_t>(request.tokens.size()) + 1;
  if (reason == sampling::FinishReason::kNone && context >= max_model_len_) {
    reason = sampling::FinishReason::kLength;
  }
  RequestEvent event;
  event.tokens = emitted;
  if (request.spec.prefill_only) event.state = request.state->Serialize();
  request.tokens.insert(request.tokens.end(), emitted.begin(), emitted.end());
  request.generated += static_cast<int64_t>(emitted.size());
  {
    std::lock_guard lock(mu_);
    stats_.generated_tokens += static_cast<int64_t>(emitted.size());
  }
  if (reason == sampling::FinishReason::kNone && !request.spec.prefill_only) {
    request.sink(event);
    return;
  }
  event.outcome = Outcome::kFinished;
  event.finish_reason = reason;
  event.prompt_tokens = static_cast<int64_t>(request.spec.prompt.size());
  event.generated_tokens = request.generated;
  event.spec = request.spec_stats;
  MarkDone(request);
  request.sink(event);
}

void ServingEngine::MarkDone(Active& request) {
  request.done = true;
  request.state.reset();  // frees its cache blocks before the sink learns it is done
  std::lock_guard lock(mu_);
  known_ids_.erase(request.spec.id);  // Cancel() of a finished request now answers false
}

void ServingEngine::Finish(Active& request, Outcome outcome, sampling::FinishReason reason,
                           std::string error) {
  if (request.done) return;
  MarkDone(request);
  RequestEvent event;
  event.outcome = outcome;
  event.finish_reason = reason;
  event.error = std::move(error);
  event.prompt_tokens = static_cast<int64_t>(request.spec.prompt.size());
  event.generated_tokens = request.generated;
  event.spec = request.spec_stats;
  request.sink(event);
}

void ServingEngine::ReapFinished() {
  std::lock_guard lock(mu_);
  std::erase_if(running_, [](const auto& r) { return r->done; });
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.cache_bytes_in_use = model_->pools().bytes_in_use();
  stats_.cache_blocks_in_use = model_->pools().blocks_in_use();
}

}  // namespace pdspark::serving
