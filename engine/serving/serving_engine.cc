#include "engine/serving/serving_engine.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine/cache/cache_budget.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/speculative_acceptance.h"
#include "engine/serving/pending_context.h"

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
  Clock::time_point submitted = Clock::now();
  CacheLease lease;  // of the KV pool, from admission to MarkDone
  SpecStats spec_stats;
  // DSpark: the drafter context of the first drafter_state->num_positions() tokens, and this
  // round's drafts with the distributions they were drawn from (empty rows when greedy).
  std::unique_ptr<dspark::DrafterState> drafter_state;
  // Target features of the positions after the ring's, not appended yet (see CatchUpRing);
  // set whenever drafter_state is.
  std::optional<PendingContext> pending_context;
  std::vector<int32_t> draft;
  std::vector<float> draft_probs;
  // auto: this round's confidence logits (every drafted slot) and the survivals expected of
  // this request's next draft (a running mean of its calibrated survivals; empty = none yet).
  std::vector<float> draft_logits;
  std::vector<double> predicted_survival;

  int64_t fed() const { return state ? state->num_tokens() : 0; }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - fed(); }
};

ServingEngine::ServingEngine(std::unique_ptr<engine::Model> model, const ServingOptions& options)
    : model_(std::move(model)),
      options_(options),
      max_model_len_(options.max_model_len > 0 ? options.max_model_len
                                               : model_->config().max_position_embeddings),
      ledger_(std::make_shared<CacheLedger>(model_->kv_pool().capacity_bytes())),
      step_timer_(model_->backend(0).NewTimer()),
      call_timer_(model_->backend(0).NewTimer()) {
  for (int64_t id : model_->config().eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(id));
  if (eos_ids_.empty()) eos_ids_.push_back(static_cast<int32_t>(model_->config().eos_token_id));
  if (SpecEnabled() && options_.spec_auto) {
    const int64_t block = options_.drafter->block_size();
    for (int i = 0; i < 2; ++i) {
      calibration_.emplace_back(block, options_.drafter->confidence_temperatures());
      // Until rounds are observed: DSpark's published prefix survivals (dspark_dsv4.md B.4.5),
      // optimistic enough that the first steps draft and measure.
      const double prior[] = {0.78, 0.55, 0.37, 0.24, 0.16, 0.11, 0.08};
      prior_survival_.emplace_back();
      for (int64_t k = 0; k < block; ++k)
        prior_survival_.back().push_back(prior[std::min<int64_t>(k, 6)]);
    }
    if (options_.spec_auto_costs) {
      spec_costs_ = *options_.spec_auto_costs;
    } else {
      auto costs = SpecCostModel::Measure(*model_, *options_.drafter,
                                          std::min<int64_t>(options_.max_num_seqs, 128));
      if (costs.ok()) {
        spec_costs_ = std::move(costs).value();
        LOG_INFO("dspark auto cost profile (ms) {}", spec_costs_.Describe());
      } else {
        LOG_WARN("dspark auto cost profile failed, scheduling without it error={}",
                 costs.status().ToString());
      }
    }
  }
  if (SpecEnabled()) drafter_state_bytes_ = options_.drafter->StatePoolBytes(model_->kv_pool());
  stats_.cache_capacity_bytes = cache_budget_bytes();
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
  if (spec.prefilled && spec.generated.empty()) {
    return absl::InvalidArgumentError("a prefilled request needs its first token");
  }
  if (const int64_t need = CacheReservation(spec); need > cache_budget_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request needs up to ", need, " bytes of cache, more than the whole KV pool of ",
        cache_budget_bytes(), " bytes (--kv-cache-memory-bytes)"));
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

bool ServingEngine::IsQueued(const std::string& id) const {
  std::lock_guard lock(mu_);
  return std::any_of(waiting_.begin(), waiting_.end(),
                     [&](const auto& r) { return r->spec.id == id; });
}

ServingStats ServingEngine::Stats() const {
  std::lock_guard lock(mu_);
  ServingStats stats = stats_;
  stats.cache_bytes_reserved = ledger_->leased();
  return stats;
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
      // A request waiting for cache still ends by its deadline (failed below).
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (Clock::now() < (*it)->spec.deadline) {
          ++it;
          continue;
        }
        running_.push_back(std::move(*it));
        it = waiting_.erase(it);
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
  // A request that brings its lease (its KV transfer reserved the cache) owns its pages already:
  // it must not wait behind one that waits for cache, which may be waiting for that very lease.
  for (auto it = waiting_.begin(); it != waiting_.end() && active < options_.max_num_seqs;) {
    Active& request = **it;
    const bool brings_lease = request.spec.prefilled && request.spec.prefilled->lease.bytes() > 0;
    if (!brings_lease || !LeaseCache(request)) {
      ++it;
      continue;
    }
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
    ++active;
  }
  while (!waiting_.empty() && active < options_.max_num_seqs) {
    // First come, first served: the head of the queue waits for cache, nobody overtakes it.
    if (!LeaseCache(*waiting_.front())) break;
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
  RETURN_IF_ERROR(AdoptPrefilledState(request));
  if (request.drafter_state) {
    request.pending_context.emplace(FeatureWidth(), *request.drafter_state);
  }
  request.tokens = spec.prompt;
  request.tokens.insert(request.tokens.end(), spec.generated.begin(), spec.generated.end());
  request.generated = static_cast<int64_t>(spec.generated.size());
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

// A prefilled (disaggregated) request brings its prompt's state, restored on the decode
// worker's gRPC thread, and — when this engine speculates — the DSpark context ring the prefill
// worker built from the same features a colocated prefill would have used. Rebuilding the ring
// here instead would cost a second prompt forward, so a missing ring is an error.
Status ServingEngine::AdoptPrefilledState(Active& request) {
  const RequestSpec& spec = request.spec;
  if (!spec.prefilled) {
    request.state = model_->NewSequence();
    // prefill_only requests build the ring too: the prefill worker ships it with the state.
    if (SpecEnabled()) {
      ASSIGN_OR_RETURN(request.drafter_state, options_.drafter->NewState(model_->kv_pool()));
    }
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
  if (!SpecEnabled()) return absl::OkStatus();
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

StatusOr<std::unique_ptr<dspark::DrafterState>> ServingEngine::NewDrafterState() const {
  if (!SpecEnabled()) return std::unique_ptr<dspark::DrafterState>();
  return options_.drafter->NewState(model_->kv_pool());
}

StatusOr<std::shared_ptr<PrefilledState>> ServingEngine::RestorePrefilled(
    std::string_view state, std::string_view drafter_state) {
  auto prefilled = std::make_shared<PrefilledState>();
  prefilled->sequence = model_->NewSequence();
  RETURN_IF_ERROR(prefilled->sequence->Restore(state));
  if (!drafter_state.empty() && SpecEnabled()) {
    ASSIGN_OR_RETURN(prefilled->drafter, options_.drafter->NewState(model_->kv_pool()));
    RETURN_IF_ERROR(prefilled->drafter->Restore(drafter_state));
  }
  return prefilled;
}

// Draft tokens for this request's next round; 0 means a plain decode step. Never drafts past
// max_tokens or the model length (the round emits up to gamma + 1 tokens).
int64_t ServingEngine::DraftLength(const Active& r) const {
  // A prefill_only request ends at its first token: its ring is only built to be shipped.
  if (!r.drafter_state || r.spec.prefill_only || r.pending() != 1 || RingPositions(r) != r.fed()) {
    return 0;
  }
  const int64_t block = options_.drafter->block_size();
  int64_t gamma = options_.spec_auto ? block : std::min(options_.spec_tokens, block);
  gamma = std::min<int64_t>(gamma, r.spec.sampling.max_tokens - r.generated - 1);
  gamma = std::min<int64_t>(gamma, max_model_len_ - static_cast<int64_t>(r.tokens.size()) - 1);
  return std::max<int64_t>(gamma, 0);
}

// One batched drafter forward for every request that speculates this step (auto: the ones
// ChooseDrafting picks). Drafts use the request's own logits processing (stop-token
// suppression, temperature, top-k/p) so that q is the distribution the acceptance rule divides
// by, and the request's sampler (seeded runs stay reproducible).
bool ServingEngine::DraftAll() {
  std::vector<Active*> candidates;
  std::vector<int64_t> caps;
  for (auto& r : running_) {
    r->draft.clear();
    r->draft_probs.clear();
    r->draft_logits.clear();
    if (r->done || !r->started) continue;
    const int64_t cap = DraftLength(*r);
    if (cap == 0) continue;
    candidates.push_back(r.get());
    caps.push_back(cap);
  }
  if (candidates.empty()) return false;
  std::vector<Active*> drafting;
  std::vector<int64_t> gammas;
  if (options_.spec_auto) {
    ChooseDrafting(candidates, caps, drafting, gammas);
  } else {
    drafting = candidates;
    gammas = caps;
  }
  if (drafting.empty()) return false;
  std::vector<dspark::DraftInput> inputs;
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < drafting.size(); ++i) {
    Active* req = drafting[i];
    CatchUpRing(*req);
    dspark::DraftInput in;
    in.state = req->drafter_state.get();
    in.anchor_token = req->tokens.back();
    in.gamma = gammas[i];
    in.choose = [this, req, vocab](int64_t slot, std::span<float> logits) {
      sampling::SuppressStopTokens(req->spec.sampling, eos_ids_,
                                   static_cast<int32_t>(req->generated + slot), logits);
      if (req->sampler->greedy()) return sampling::Sampler::Greedy(logits);
      const size_t at = req->draft_probs.size();
      req->draft_probs.resize(at + vocab);
      std::span<float> q(req->draft_probs.data() + at, vocab);
      req->sampler->ProcessLogits(logits, q);
      return req->sampler->Sample(q);
    };
    inputs.push_back(std::move(in));
  }
  call_timer_->Start();
  std::vector<dspark::DraftOutput> drafts = options_.drafter->Draft(inputs);
  if (options_.spec_auto) {
    spec_costs_.ObserveDraft(static_cast<int64_t>(inputs.size()),
                             *std::max_element(gammas.begin(), gammas.end()), call_timer_->Stop());
  }
  for (size_t i = 0; i < drafting.size(); ++i) drafting[i]->draft = drafts[i].tokens;
  if (options_.spec_auto) ScheduleVerifyLengths(drafting, drafts);
  return true;
}

// The decode part of the step without drafts, as PlanStep will build it: every decoding request
// feeds one token and commits one. Prefill chunks that share the step are left out: their rows
// commit no token, so counting them would make the plain step look slow and every verify row
// look worth its cost; verify rows are judged against plain decoding. (They come first in the
// token budget, so the prefill chunks do not limit them either.)
dspark::StepBase ServingEngine::BaseOfStep() const {
  dspark::StepBase base;
  base.max_rows = options_.max_batch_tokens;
  for (const auto& r : running_) {
    if (r->done || !r->started || r->pending() != 1) continue;
    ++base.sequences;
    ++base.rows;
    base.tokens += 1;
  }
  return base;
}

dspark::ConfidenceCalibration& ServingEngine::Calibration(const Active& request) {
  return calibration_[request.sampler->greedy() ? 0 : 1];
}

// auto, before drafting: PlanDrafts on each candidate's predicted survivals and the measured
// costs decides whether drafting pays this step, for whom and with how many slots; the
// DraftingGuard vetoes the plan where drafting steps of this batch size have realized fewer
// tokens per CPU-second than plain ones. When drafting does not happen, it stops except for
// probes — the vetoed plan, or else a full draft of two candidates (round robin), after 8 idle
// steps, the gap doubling up to 1024 while probes keep showing it does not pay — which keep the
// predictions, the calibration and the guard's figures following the workload.
void ServingEngine::ChooseDrafting(const std::vector<Active*>& candidates,
                                   const std::vector<int64_t>& caps, std::vector<Active*>& drafting,
                                   std::vector<int64_t>& gammas) {
  constexpr int64_t kFirstProbeGap = 8, kMaxProbeGap = 1024;
  constexpr size_t kProbeRequests = 2;
  std::vector<std::vector<double>> predicted;
  for (Active* r : candidates) {
    predicted.push_back(r->predicted_survival.empty()
                            ? prior_survival_[r->sampler->greedy() ? 0 : 1]
                            : r->predicted_survival);
  }
  // A candidate's ring catches up with the positions it holds back before it can draft.
  std::vector<double> setup;
  for (Active* r : candidates)
    setup.push_back(spec_costs_.ContextSeconds(r->pending_context->held()));
  const int64_t block = options_.drafter->block_size();
  const dspark::StepBase base = BaseOfStep();
  dspark::DraftPlan plan = dspark::PlanDrafts(
      predicted, caps, block, base,
      [this](int64_t s, int64_t rows) { return spec_costs_.TargetSeconds(s, rows); },
      [this](int64_t r, int64_t g) { return spec_costs_.DraftSeconds(r, g); },
      options_.spec_auto_min_survival, options_.spec_auto_min_speedup, setup);
  // Unprofiled, drafting is free by definition: nothing to guard.
  const bool vetoed =
      plan.gamma > 0 && spec_costs_.profiled() && !drafting_guard_.AllowDrafting(base.sequences);
  if (plan.gamma > 0 && !vetoed) {
    auto_idle_steps_ = 0;
    auto_probe_gap_ = kFirstProbeGap;
  } else {
    if (++auto_idle_steps_ < std::max(auto_probe_gap_, kFirstProbeGap)) return;
    auto_idle_steps_ = 0;
    auto_probe_gap_ = std::min(2 * std::max(auto_probe_gap_, kFirstProbeGap), kMaxProbeGap);
    if (!vetoed) {
      plan.gamma = block;
      for (size_t i = 0; i < std::min(kProbeRequests, candidates.size()); ++i) {
        plan.requests.push_back(auto_probe_cursor_++ % candidates.size());
      }
    }
  }
  for (size_t i : plan.requests) {
    drafting.push_back(candidates[i]);
    gammas.push_back(std::min(plan.gamma, caps[i]));
  }
}

// auto, after drafting: calibrated survivals of the actual drafts (which also update the
// predictions for the next steps), then Algorithm 1 picks each verify prefix with the drafter's
// cost already paid. Lossless: c_k comes from y_k and the embedding of the *previous* token, so
// the decision to verify d_k never looks at d_k itself (the paper's Appendix A counterexample
// does), and every verified draft stays an exact sample of its q.
void ServingEngine::ScheduleVerifyLengths(const std::vector<Active*>& drafting,
                                          const std::vector<dspark::DraftOutput>& drafts) {
  const int64_t vocab = model_->config().vocab_size;
  std::vector<std::vector<double>> survival;
  for (size_t i = 0; i < drafting.size(); ++i) {
    Active& r = *drafting[i];
    r.draft_logits = drafts[i].confidence_logits;
    survival.push_back(Calibration(r).Survival(r.draft_logits));
    // Running means: the request's own (half-life one round) and the prior for new requests.
    std::vector<double>& prior = prior_survival_[r.sampler->greedy() ? 0 : 1];
    if (r.predicted_survival.empty()) r.predicted_survival = prior;
    for (size_t k = 0; k < survival[i].size(); ++k) {
      r.predicted_survival[k] = 0.5 * r.predicted_survival[k] + 0.5 * survival[i][k];
      prior[k] = 0.95 * prior[k] + 0.05 * survival[i][k];
    }
  }
  const std::vector<int64_t> lengths = dspark::ChooseVerifyLengths(
      survival, BaseOfStep(),
      [this](int64_t s, int64_t rows) { return spec_costs_.TargetSeconds(s, rows); },
      options_.spec_auto_min_survival);
  for (size_t i = 0; i < drafting.size(); ++i) {
    drafting[i]->draft.resize(lengths[i]);
    if (!drafting[i]->draft_probs.empty()) drafting[i]->draft_probs.resize(lengths[i] * vocab);
  }
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
    if (!r->draft.empty()) {  // a verify round: [anchor, d_1..d_gamma] in one piece
      const int64_t need = 1 + static_cast<int64_t>(r->draft.size());
      if (need > budget && !planned.empty()) {
        r->draft.clear();
        r->draft_probs.clear();
      } else {
        budget -= need;
        chunks.emplace_back(r->tokens.end() - 1, r->tokens.end());
        chunks.back().insert(chunks.back().end(), r->draft.begin(), r->draft.end());
        planned.push_back(r);
        continue;
      }
    }
    const int64_t take = std::min(r->pending(), std::max<int64_t>(budget, planned.empty() ? 1 : 0));
    if (take <= 0) break;
    budget -= take;
    chunks.emplace_back(r->tokens.begin() + r->fed(), r->tokens.begin() + r->fed() + take);
    planned.push_back(r);
  }
  for (size_t i = 0; i < planned.size(); ++i)
    inputs.push_back({planned[i]->state.get(), chunks[i]});
  return planned;
}

void ServingEngine::RunStep() {
  const auto step_start = Clock::now();
  std::vector<engine::StepInput> inputs;
  std::vector<std::vector<int32_t>> chunks;
  chunks.reserve(running_.size());
  step_timer_->Start();
  const bool drafted = SpecEnabled() && DraftAll();
  std::vector<Active*> planned = PlanStep(inputs, chunks);
  if (planned.empty()) return;
  // auto: a decode step (no prefill chunk) is a sample for the cost model and the DraftingGuard
  // (prefill chunks are shaped unlike anything they predict).
  bool decode_step = options_.spec_auto;
  std::vector<int64_t> generated_before;
  for (Active* r : planned) {
    decode_step = decode_step && r->pending() == 1;
    generated_before.push_back(r->generated);
  }
  bool verifying = false;
  for (Active* r : planned) verifying = verifying || !r->draft.empty();
  engine::StepOptions step_options;
  step_options.logits =
      verifying ? engine::LogitsMode::kAllTokens : engine::LogitsMode::kLastTokenPerSequence;
  // Every fed position's drafter context comes from this step's target features.
  step_options.features = SpecEnabled();
  // Prefill workers ship each layer's new cache rows as soon as the layer is done.
  std::vector<Active*> observed;
  for (Active* r : planned) {
    if (r->spec.state_observer) observed.push_back(r);
  }
  if (!observed.empty()) {
    step_options.on_layer_done = [&observed](int64_t layer) {
      for (Active* r : observed) r->spec.state_observer->OnLayerDone(*r->state, layer);
    };
  }
  call_timer_->Start();
  auto output = model_->Step(inputs, step_options);
  if (decode_step && output.ok()) {
    spec_costs_.ObserveTarget(static_cast<int64_t>(planned.size()), output->row_offsets.back(),
                              call_timer_->Stop());
  }
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
  const int64_t feature_width = FeatureWidth();
  for (size_t i = 0; i < planned.size(); ++i) {
    Active& r = *planned[i];
    const int64_t begin = output->row_offsets[i], end = output->row_offsets[i + 1];
    // The state already holds this step's tokens; the ring's context follows it.
    if (r.drafter_state && RingPositions(r) == r.fed() - (end - begin)) {
      r.pending_context->Add(output->features.data() + begin * feature_width, end - begin);
      if (r.pending_context->MustFlush()) CatchUpRing(r);
    }
    if (!r.draft.empty()) {
      AfterVerify(r, output->logits.data() + begin * vocab);
    } else {
      const int64_t row = verifying ? end - 1 : static_cast<int64_t>(i);
      AfterStep(r, output->logits.data() + row * vocab, true);
    }
  }
  if (decode_step) {
    double committed = 0;
    for (size_t i = 0; i < planned.size(); ++i)
      committed += static_cast<double>(planned[i]->generated - generated_before[i]);
    drafting_guard_.Observe(static_cast<int64_t>(planned.size()), drafted, committed,
                            step_timer_->Stop());
  }
  std::lock_guard lock(mu_);
  ++stats_.steps;
  stats_.step_seconds.Observe(std::chrono::duration<double>(Clock::now() - step_start).count());
  stats_.batch_size.Observe(static_cast<double>(planned.size()));
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
  Emit(request, std::move(emitted), reason);
}

void ServingEngine::Emit(Active& request, std::vector<int32_t> emitted,
                         sampling::FinishReason reason) {
  const int64_t context = static_cast<int64_t>(request.tokens.size() + emitted.size());
  if (reason == sampling::FinishReason::kNone && context >= max_model_len_) {
    reason = sampling::FinishReason::kLength;
  }
  RequestEvent event;
  event.tokens = emitted;
  if (request.spec.prefill_only) {
    if (request.drafter_state) CatchUpRing(request);
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
          static_cast<int64_t>(request.spec.prompt.size() + request.spec.generated.size());
    }
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

// Judges this round's drafts against the verify rows p_0..p_gamma, commits exactly the
// accepted positions (the target state and the drafter ring are truncated to the anchor plus
// the accepted drafts; the correction/bonus token is fed next round) and emits all tokens in
// one event.
void ServingEngine::AfterVerify(Active& r, const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  const int64_t gamma = static_cast<int64_t>(r.draft.size());
  const int64_t anchor_position = static_cast<int64_t>(r.tokens.size()) - 1;
  std::vector<float> target(logits, logits + (gamma + 1) * vocab);
  for (int64_t k = 0; k <= gamma; ++k) {
    std::span<float> row(target.data() + k * vocab, vocab);
    sampling::SuppressStopTokens(r.spec.sampling, eos_ids_, static_cast<int32_t>(r.generated + k),
                                 row);
    if (!r.sampler->greedy())
      r.sampler->ProcessLogits(std::vector<float>(row.begin(), row.end()), row);
  }
  sampling::DraftVerification v;
  v.draft_tokens = r.draft;
  v.draft_probs = r.draft_probs;
  v.target_probs = target;
  v.vocab_size = vocab;
  auto result = sampling::AcceptDraftTokens(v, *r.sampler);
  if (!result.ok()) {
    Finish(r, Outcome::kFailed, sampling::FinishReason::kNone,
           std::string(result.status().message()));
    return;
  }
  if (options_.spec_auto) {
    dspark::ConfidenceCalibration& calibration = Calibration(r);
    calibration.Observe(r.draft_logits, gamma, result->num_accepted);
    if (r.sampler->greedy()) {
      std::lock_guard lock(mu_);
      stats_.spec_temperatures = calibration.temperatures();
    }
  }
  SpecStats& st = r.spec_stats;
  ++st.drafts;
  st.draft_tokens += gamma;
  st.accepted_tokens += result->num_accepted;
  if (static_cast<int64_t>(st.accepted_per_position.size()) < gamma) {
    st.accepted_per_position.resize(gamma, 0);
  }
  for (int32_t k = 0; k < result->num_accepted; ++k) ++st.accepted_per_position[k];
  {
    std::lock_guard lock(mu_);
    SpecStats& total = stats_.spec;
    ++total.drafts;
    total.draft_tokens += gamma;
    total.accepted_tokens += result->num_accepted;
    if (static_cast<int64_t>(total.accepted_per_position.size()) < gamma) {
      total.accepted_per_position.resize(gamma, 0);
    }
    for (int32_t k = 0; k < result->num_accepted; ++k) ++total.accepted_per_position[k];
    if (static_cast<int64_t>(total.verify_lengths.size()) <= gamma) {
      total.verify_lengths.resize(gamma + 1, 0);
    }
    ++total.verify_lengths[gamma];
  }
  auto reason = sampling::ApplyStopConditions(r.spec.sampling, eos_ids_,
                                              static_cast<int32_t>(r.generated), &*result);
  const int64_t committed = anchor_position + 1 + result->num_accepted;
  Status st_target = r.state->Truncate(committed);
  Status st_drafter = TruncateRing(r, committed);
  r.draft.clear();
  r.draft_probs.clear();
  if (!st_target.ok() || !st_drafter.ok()) {
    Finish(r, Outcome::kFailed, sampling::FinishReason::kNone,
           std::string((st_target.ok() ? st_drafter : st_target).message()));
    return;
  }
  Emit(r, std::move(result->tokens), reason);
}

int64_t ServingEngine::FeatureWidth() const {
  return options_.drafter ? options_.drafter->num_feature_layers() * model_->config().hidden_size
                          : 0;
}

int64_t ServingEngine::RingPositions(const Active& r) const {
  return r.drafter_state->num_positions() + r.pending_context->positions();
}

// The drafter context of a position is only needed once the request drafts or ships its ring,
// so it is appended then (see PendingContext).
void ServingEngine::CatchUpRing(Active& r) const {
  r.pending_context->Flush(*options_.drafter, *r.drafter_state);
}

Status ServingEngine::TruncateRing(Active& r, int64_t positions) const {
  const int64_t appended = r.drafter_state->num_positions();
  if (positions >= appended) return r.pending_context->Truncate(positions - appended);
  RETURN_IF_ERROR(r.pending_context->Truncate(0));
  return r.drafter_state->Truncate(positions);
}

void ServingEngine::MarkDone(Active& request) {
  request.done = true;
  request.state.reset();  // frees its cache blocks before the sink learns it is done
  request.drafter_state.reset();
  std::lock_guard lock(mu_);
  known_ids_.erase(request.spec.id);  // Cancel() of a finished request now answers false
  request.lease.Release();
  // Stats() must show the freed cache by the time the sink hears the request is done (a
  // caller that checks cache usage right after its final event would otherwise race the loop).
  UpdateCacheStatsLocked();
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
  UpdateCacheStatsLocked();
}

void ServingEngine::UpdateCacheStatsLocked() {
  const engine::KvPool& pool = model_->kv_pool();
  stats_.cache_bytes_in_use = pool.bytes_in_use();
  stats_.cache_blocks_in_use = pool.pages_in_use();
  stats_.cache_high_water_bytes = pool.high_water_pages() * pool.page_bytes();
  stats_.cache_bytes_by_group = pool.BytesInUseByGroup();
}

int64_t ServingEngine::CacheBytesFor(int64_t tokens, bool drafting) const {
  // A verify round feeds block_size + 1 tokens even when that exceeds max_batch_tokens.
  const int64_t step_tokens = std::max<int64_t>(
      options_.max_batch_tokens, options_.drafter ? options_.drafter->block_size() + 1 : 1);
  const int64_t pools = engine::TotalBytes(engine::SequenceBytesBound(
      model_->cache_layout(), model_->page_geometry(), tokens, step_tokens));
  return pools + (drafting ? drafter_state_bytes_ : 0);
}

Status ServingEngine::CheckCacheBudget() const {
  const int64_t need = CacheBytesFor(max_model_len_, SpecEnabled());
  if (need <= cache_budget_bytes()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-cache-memory-bytes ", cache_budget_bytes(),
                   " cannot hold one sequence of ", "--max-model-len ", max_model_len_,
                   " tokens (needs ", need, " bytes): raise the budget or lower --max-model-len"));
}

// The most tokens the request's state can hold: the prompt alone for a prefill, else the
// prompt plus max_tokens (drafts are clamped to both limits), capped by the model length.
int64_t ServingEngine::CacheBytesForRequest(int64_t prompt_tokens, int64_t max_tokens,
                                            bool prefill_only) const {
  if (prefill_only) return CacheBytesFor(prompt_tokens, false);
  return CacheBytesFor(std::min(prompt_tokens + max_tokens, max_model_len_), SpecEnabled());
}

int64_t ServingEngine::CacheReservation(const RequestSpec& spec) const {
  return CacheBytesForRequest(
      static_cast<int64_t>(spec.prompt.size()),
      std::max<int64_t>(spec.sampling.max_tokens, static_cast<int64_t>(spec.generated.size())),
      spec.prefill_only);
}

bool ServingEngine::LeaseCache(Active& request) {
  if (request.spec.prefilled) request.lease = std::move(request.spec.prefilled->lease);
  const int64_t need = CacheReservation(request.spec);
  if (request.lease.bytes() >= need) return true;
  if (request.lease.bytes() > 0) return request.lease.Grow(need - request.lease.bytes());
  auto lease = ledger_->TryLease(need);
  if (!lease) return false;
  request.lease = std::move(*lease);
  return true;
}

StatusOr<CacheLease> ServingEngine::ReserveCache(int64_t prompt_tokens, int64_t max_tokens) const {
  const int64_t need = CacheBytesForRequest(prompt_tokens, std::max<int64_t>(max_tokens, 1), false);
  auto lease = ledger_->TryLease(need);
  if (!lease) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool fully leased: ", ledger_->leased(),
                                                     " of ", ledger_->capacity(), " bytes, ", need,
                                                     " more needed (--kv-cache-memory-bytes)"));
  }
  return std::move(*lease);
}

}  // namespace pdspark::serving
