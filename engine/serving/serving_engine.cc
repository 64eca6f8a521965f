#include "engine/serving/serving_engine.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine/sampling/sampler.h"

namespace pdspark::serving {

namespace {

std::vector<int32_t> EosIds(const config::ModelConfig& config) {
  std::vector<int32_t> ids;
  for (int64_t id : config.eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  if (ids.empty()) ids.push_back(static_cast<int32_t>(config.eos_token_id));
  return ids;
}

}  // namespace

ServingEngine::ServingEngine(std::unique_ptr<engine::Model> model, const ServingOptions& options)
    : model_(std::move(model)),
      options_(options),
      max_model_len_(options.max_model_len > 0 ? options.max_model_len
                                               : model_->config().max_position_embeddings),
      eos_ids_(EosIds(model_->config())),
      spec_(options, *model_, eos_ids_, max_model_len_),
      runner_(*model_, spec_.enabled() ? options.drafter.get() : nullptr),
      scheduler_(options_, *model_, max_model_len_, spec_.enabled(),
                 spec_.enabled() ? options.drafter->StatePoolBytes(model_->kv_pool()) : 0),
      output_(model_->config().vocab_size, eos_ids_, &spec_, options.vocabulary.get(),
              options.spec_acceptance),
      step_timer_(model_->backend(0).NewTimer()) {
  if (options.enable_prefix_caching) {
    prefix_cache_ = std::make_unique<PrefixCache>(
        &model_->kv_pool(), options.prefix_cache_block_tokens, options.prefix_cache_max_entries);
  }
  stats_.prefix_caching = prefix_cache_ != nullptr;
  stats_.cache_capacity_bytes = scheduler_.capacity_bytes();
  stats_.kv_bytes_per_token = engine::KvBytesPerToken(model_->cache_layout());
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
  RETURN_IF_ERROR(spec.sampling.CheckTokenIds(vocab));
  RETURN_IF_ERROR(output_.CanConstrain(spec.sampling));
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
  if (spec.prefilled && spec.generated.empty()) {
    return absl::InvalidArgumentError("a prefilled request needs its first token");
  }
  if (const int64_t need = scheduler_.CacheReservation(spec); need > scheduler_.capacity_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request needs up to ", need, " bytes of cache, more than the whole KV pool of ",
        scheduler_.capacity_bytes(), " bytes (--kv-cache-memory-bytes)"));
  }
  auto request = std::make_unique<ActiveRequest>();
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

bool ServingEngine::IsQueued(const std::string& id) const {
  std::lock_guard lock(mu_);
  return std::any_of(waiting_.begin(), waiting_.end(),
                     [&](const auto& r) { return r->spec.id == id; });
}

ServingStats ServingEngine::Stats() const {
  std::lock_guard lock(mu_);
  ServingStats stats = stats_;
  // Read from the pool as it is now: pages also move off the engine thread (a KV transfer's
  // reservation), and a sink that checks right after a request's final event sees them freed.
  FillCacheStats(stats);
  stats.cache_bytes_reserved = scheduler_.leased_bytes();
  return stats;
}

PrefixHit ServingEngine::CachedPrefix(std::span<const int32_t> prompt) {
  if (!prefix_cache_) return {};
  return prefix_cache_->Lookup(prompt, {}, /*with_ring=*/false);
}

PrefixCache::Published ServingEngine::CachedPrefixes() const {
  return prefix_cache_ ? prefix_cache_->Publish() : PrefixCache::Published{};
}

void ServingEngine::Loop() {
  bool idle = true;  // nothing ran since the backends last released their cached memory
  while (true) {
    std::vector<std::string> cancels;
    {
      std::unique_lock lock(mu_);
      const auto has_work = [&] {
        return stop_ || !waiting_.empty() || !running_.empty() || !cancel_requests_.empty();
      };
      if (!idle && !has_work()) {
        // Going idle: what the backends keep of freed memory for the next step goes back, so an
        // idle worker's resident memory is its state, not its last step's peak.
        lock.unlock();
        runner_.ReleaseCachedMemory();
        lock.lock();
        idle = true;
      }
      wake_.wait(lock, has_work);
      if (stop_) return;
      idle = false;
      cancels.swap(cancel_requests_);
      for (const std::string& id : cancels) {
        auto it = std::find_if(waiting_.begin(), waiting_.end(),
                               [&](const auto& r) { return r->spec.id == id; });
        if (it == waiting_.end()) continue;
        running_.push_back(std::move(*it));  // finished below like a running one
        waiting_.erase(it);
      }
      // A request waiting for cache still ends by its deadline (failed below).
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (Clock::now() < (*it)->spec.deadline) {
          ++it;
          continue;
        }
        running_.push_back(std::move(*it));
        it = waiting_.erase(it);
      }
      scheduler_.Admit(waiting_, running_);
      stats_.waiting = static_cast<int64_t>(waiting_.size());
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
        if (WaitsForASharedPrompt(*request)) continue;
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

Status ServingEngine::StartRequest(ActiveRequest& request) {
  const RequestSpec& spec = request.spec;
  ASSIGN_OR_RETURN(auto sampler, sampling::Sampler::Create(spec.sampling));
  request.sampler.emplace(std::move(sampler));
  output_.StartGrammar(request);
  // Replaying already generated tokens (disaggregated first token, failover) must leave the
  // request's RNG where a colocated run would have it: one draw per sampled token.
  if (!request.sampler->greedy()) {
    for (size_t i = 0; i < spec.generated.size(); ++i) request.sampler->Uniform();
  }
  RETURN_IF_ERROR(runner_.InitStates(request));
  request.tokens = spec.prompt;
  request.tokens.insert(request.tokens.end(), spec.generated.begin(), spec.generated.end());
  request.generated = static_cast<int64_t>(spec.generated.size());
  ReusePrefix(request);
  if (request.drafter_state) {
    request.pending_context.emplace(spec_.FeatureWidth(), *request.drafter_state);
  }
  // A prefilled request brings its prompt's state: stored as a colocated prefill's would be.
  if (spec.prefilled) {
    request.prompt_stored = true;
    StorePrefix(request);
  }
  if (!spec.generated.empty()) {
    // The first token may already end the request (EOS, max_tokens = 1).
    std::vector<int32_t> last(spec.generated.end() - 1, spec.generated.end());
    const auto reason =
        sampling::ApplyStopConditions(spec.sampling, eos_ids_, request.generated - 1, &last);
    if (reason != sampling::FinishReason::kNone) {
      Finish(request, Outcome::kFinished, reason, "");
    }
  }
  return absl::OkStatus();
}

// Requests that arrive together with one prompt (n samples, a burst of one system prompt and
// question) would each compute it; all but the first wait until its state is stored and then
// reuse it. Only running requests are waited for, which always reach the end of their prompt.
bool ServingEngine::WaitsForASharedPrompt(const ActiveRequest& request) const {
  const RequestSpec& spec = request.spec;
  if (!prefix_cache_ || spec.prefilled || spec.sampling.prompt_logprobs >= 0) return false;
  // Whether `prefix` starts this request's tokens (its prompt, then what it already generated).
  auto starts_this = [&spec](const std::vector<int32_t>& prefix) {
    const size_t in_prompt = std::min(prefix.size(), spec.prompt.size());
    const size_t rest = prefix.size() - in_prompt;
    return rest <= spec.generated.size() &&
           std::equal(prefix.begin(), prefix.begin() + in_prompt, spec.prompt.begin()) &&
           std::equal(prefix.begin() + in_prompt, prefix.end(), spec.generated.begin());
  };
  for (const auto& other : running_) {
    if (!other->live() || other->prompt_stored || other->spec.prefilled) continue;
    const int64_t prompt = static_cast<int64_t>(other->spec.prompt.size());
    if (prompt < options_.prefix_cache_block_tokens || other->fed() >= prompt) continue;
    if (starts_this(other->spec.prompt)) return true;
  }
  return false;
}

void ServingEngine::ReusePrefix(ActiveRequest& request) {
  if (!prefix_cache_ || request.spec.prefilled) return;
  // Prompt logprobs need every prompt position's logits: such a request computes them all.
  if (request.spec.sampling.prompt_logprobs < 0) {
    PrefixHit hit = prefix_cache_->Lookup(request.tokens, request.spec.keep_rows_from,
                                          request.drafter_state != nullptr);
    if (hit.tokens > 0) {
      request.state = std::move(hit.state);
      if (request.drafter_state) request.drafter_state = std::move(hit.ring);
      request.cached_tokens = hit.tokens;
    }
  }
  request.store_at = prefix_cache_->BranchPoint(request.tokens, request.fed());
}

// After a step fed the request's tokens (not a verify round, whose state holds drafts).
void ServingEngine::StorePrefixAtStepEnd(ActiveRequest& request) {
  if (!prefix_cache_ || request.done) return;
  const bool branch_point = request.store_at > 0 && request.fed() == request.store_at;
  const bool prompt_in = request.pending() == 0 && !request.prompt_stored;
  if (prompt_in) request.prompt_stored = true;
  if (branch_point || prompt_in) StorePrefix(request);
}

void ServingEngine::StorePrefix(ActiveRequest& request) {
  if (!prefix_cache_) return;
  // The entry's ring must hold every position its state does.
  if (request.drafter_state) spec_.CatchUpRing(request);
  prefix_cache_->Store(request.tokens, *request.state, request.drafter_state.get());
}

StatusOr<std::unique_ptr<dspark::DrafterState>> ServingEngine::NewDrafterState() const {
  return runner_.NewRing();
}

StatusOr<std::shared_ptr<PrefilledState>> ServingEngine::RestorePrefilled(
    std::string_view state, std::string_view drafter_state) {
  return runner_.Restore(state, drafter_state);
}

void ServingEngine::RunStep() {
  const auto step_start = Clock::now();
  std::vector<engine::StepInput> inputs;
  std::vector<std::vector<int32_t>> chunks;
  chunks.reserve(running_.size());
  step_timer_->Start();
  const bool drafted = spec_.enabled() && spec_.DraftAll(running_);
  std::vector<ActiveRequest*> planned = scheduler_.PlanStep(running_, inputs, chunks);
  if (planned.empty()) return;
  // auto: a decode step (no prefill chunk) is a sample for the cost model and the DraftingGuard
  // (prefill chunks are shaped unlike anything they predict).
  bool decode_step = spec_.auto_schedule();
  std::vector<int64_t> generated_before;
  for (ActiveRequest* r : planned) {
    decode_step = decode_step && r->pending() == 1;
    generated_before.push_back(r->generated);
  }
  bool argmax_only = options_.argmax_on_device;
  for (const ActiveRequest* r : planned) argmax_only = argmax_only && output_.ArgmaxSuffices(*r);
  std::vector<std::vector<kernels::GumbelRow>> draws;
  if (argmax_only) {
    for (const ActiveRequest* r : planned) draws.push_back(output_.ArgmaxDraws(*r));
  }
  auto step = runner_.Run(planned, argmax_only, inputs, draws);
  if (!step.ok()) {
    LOG_ERROR("engine step failed sequences={} error={}", planned.size(), step.status().ToString());
    for (ActiveRequest* r : planned) {
      Finish(*r, Outcome::kFailed, sampling::FinishReason::kNone,
             std::string(step.status().message()));
    }
    return;
  }
  const engine::StepOutput& output = step->output;
  if (decode_step) {
    spec_.ObserveTarget(static_cast<int64_t>(planned.size()), output.row_offsets.back(),
                        step->seconds);
  }
  const int64_t vocab = model_->config().vocab_size;
  const int64_t feature_width = spec_.FeatureWidth();
  for (size_t i = 0; i < planned.size(); ++i) {
    ActiveRequest& r = *planned[i];
    const int64_t begin = output.row_offsets[i], end = output.row_offsets[i + 1];
    // The state already holds this step's tokens; the ring's context follows it.
    if (r.drafter_state && spec_.RingPositions(r) == r.fed() - (end - begin)) {
      r.pending_context->Add(output.features.data() + begin * feature_width, end - begin);
      if (r.pending_context->MustFlush()) spec_.CatchUpRing(r);
    }
    if (r.draft.empty()) {
      StorePrefixAtStepEnd(r);
    } else {
      // A verify round is past the prompt (its last token may have come with drafts, when a
      // prefill chunk left it alone): the state holds drafts and is not stored.
      r.prompt_stored = true;
    }
    if (!r.draft.empty()) {
      AfterVerify(r, *step, i);
      continue;
    }
    if (!step->argmax_only() &&
        output.logit_offsets[i + 1] - output.logit_offsets[i] == end - begin) {
      output_.AddPromptLogprobs(r, step->Rows(i, vocab), r.fed() - (end - begin), end - begin);
    }
    AfterStep(r, *step, i);
  }
  if (decode_step) {
    double committed = 0;
    for (size_t i = 0; i < planned.size(); ++i)
      committed += static_cast<double>(planned[i]->generated - generated_before[i]);
    spec_.ObserveDecodeStep(static_cast<int64_t>(planned.size()), drafted, committed,
                            step_timer_->Stop());
  }
  std::lock_guard lock(mu_);
  ++stats_.steps;
  if (step->argmax_only()) ++stats_.argmax_steps;
  stats_.step_seconds.Observe(std::chrono::duration<double>(Clock::now() - step_start).count());
  stats_.batch_size.Observe(static_cast<double>(planned.size()));
}

void ServingEngine::AfterStep(ActiveRequest& request, const StepResult& step, size_t i) {
  if (request.pending() > 0) return;  // prefill chunk that did not reach the end yet
  const int64_t vocab = model_->config().vocab_size;
  Emit(request, step.argmax_only() ? output_.SampleArgmax(request, step.SampleArgmax(i))
                                   : output_.Sample(request, step.SampleRow(i, vocab)));
}

void ServingEngine::Emit(ActiveRequest& request, Emission emission) {
  const std::vector<int32_t>& emitted = emission.tokens;
  sampling::FinishReason reason = emission.reason;
  const int64_t context = static_cast<int64_t>(request.tokens.size() + emitted.size());
  if (reason == sampling::FinishReason::kNone && context >= max_model_len_) {
    reason = sampling::FinishReason::kLength;
  }
  RequestEvent event;
  event.tokens = emitted;
  event.logprobs = std::move(emission.logprobs);
  event.prompt_logprobs = std::move(request.prompt_logprobs);
  if (request.spec.prefill_only) {
    if (request.drafter_state) spec_.CatchUpRing(request);
    if (request.spec.state_observer) {
      request.spec.state_observer->OnPrefilled(*request.state, request.drafter_state.get());
    } else {
      event.state = request.state->Serialize();
      if (request.drafter_state) event.drafter_state = request.drafter_state->Serialize();
    }
  }
  const bool first_token_here =
      !request.spec.prefilled &&
      request.generated == static_cast<int64_t>(request.spec.generated.size());
  request.tokens.insert(request.tokens.end(), emitted.begin(), emitted.end());
  request.generated += static_cast<int64_t>(emitted.size());
  {
    std::lock_guard lock(mu_);
    stats_.generated_tokens += static_cast<int64_t>(emitted.size());
    if (first_token_here) {  // this engine computed the prompt (and any replayed tokens)
      stats_.prefill_seconds.Observe(
          std::chrono::duration<double>(Clock::now() - request.submitted).count());
      stats_.prompt_tokens +=
          static_cast<int64_t>(request.spec.prompt.size() + request.spec.generated.size()) -
          request.cached_tokens;
    }
  }
  if (reason == sampling::FinishReason::kNone && !request.spec.prefill_only) {
    request.sink(event);
    return;
  }
  // The next turn of a conversation starts with this one's prompt and answer.
  if (!request.spec.prefill_only) StorePrefix(request);
  event.outcome = Outcome::kFinished;
  event.finish_reason = reason;
  event.prompt_tokens = static_cast<int64_t>(request.spec.prompt.size());
  event.cached_tokens = request.cached_tokens;
  event.generated_tokens = request.generated;
  event.spec = request.spec_stats;
  MarkDone(request);
  request.sink(event);
}

// Judges this round's drafts against the verify rows p_0..p_gamma and emits every token it
// commits in one event.
void ServingEngine::AfterVerify(ActiveRequest& request, const StepResult& step, size_t i) {
  const int64_t vocab = model_->config().vocab_size;
  auto out = step.argmax_only() ? output_.VerifyArgmax(request, step.ArgmaxRows(i))
                                : output_.Verify(request, step.Rows(i, vocab));
  if (!out.ok()) {
    Finish(request, Outcome::kFailed, sampling::FinishReason::kNone,
           std::string(out.status().message()));
    return;
  }
  {
    std::lock_guard lock(mu_);
    stats_.spec.AddRound(out->gamma, out->accepted);
    if (auto temperatures = spec_.ObserveVerify(request, out->gamma, out->accepted)) {
      stats_.spec_temperatures = std::move(*temperatures);
    }
  }
  Emit(request, *std::move(out));
}

void ServingEngine::MarkDone(ActiveRequest& request) {
  request.done = true;
  request.drafter_state.reset();
  std::lock_guard lock(mu_);
  known_ids_.erase(request.spec.id);  // Cancel() of a finished request now answers false
  if (request.spec.state_observer) {
    // A KV transfer may still read the pages: the observer drops them, and the lease with them.
    request.spec.state_observer->OnRelease(std::move(request.state), std::move(request.lease));
  } else {
    request.state.reset();  // frees its cache pages before the sink learns it is done
    request.lease.Release();
  }
}

void ServingEngine::Finish(ActiveRequest& request, Outcome outcome, sampling::FinishReason reason,
                           std::string error) {
  if (request.done) return;
  MarkDone(request);
  RequestEvent event;
  event.outcome = outcome;
  event.finish_reason = reason;
  event.error = std::move(error);
  event.prompt_tokens = static_cast<int64_t>(request.spec.prompt.size());
  event.cached_tokens = request.cached_tokens;
  event.generated_tokens = request.generated;
  event.spec = request.spec_stats;
  request.sink(event);
}

void ServingEngine::ReapFinished() {
  std::lock_guard lock(mu_);
  std::erase_if(running_, [](const auto& r) { return r->done; });
  stats_.running = static_cast<int64_t>(running_.size());
}

void ServingEngine::FillCacheStats(ServingStats& stats) const {
  const engine::KvPool& pool = model_->kv_pool();
  // Pages only the prefix cache holds are as good as free: the pool reclaims them on demand.
  const int64_t reclaimable = pool.reclaimable_pages();
  stats.cache_bytes_in_use = (pool.pages_in_use() - reclaimable) * pool.page_bytes();
  stats.cache_blocks_in_use = pool.pages_in_use() - reclaimable;
  stats.prefix_cache_bytes = reclaimable * pool.page_bytes();
  if (prefix_cache_) stats.prefix_cache = prefix_cache_->Stats();
  stats.cache_high_water_bytes = pool.high_water_pages() * pool.page_bytes();
  stats.cache_bytes_by_group = pool.BytesInUseByGroup();
}

int64_t ServingEngine::CacheBytesFor(int64_t tokens, bool drafting) const {
  return scheduler_.CacheBytesFor(tokens, drafting);
}

StatusOr<CacheLease> ServingEngine::ReserveCache(int64_t prompt_tokens, int64_t max_tokens) const {
  return scheduler_.ReserveCache(prompt_tokens, max_tokens);
}

Status ServingEngine::CheckCacheBudget() const { return scheduler_.CheckCacheBudget(); }

}  // namespace pdspark::serving
