#include "engine/serving/speculation/spec_policy.h"

#include <algorithm>
#include <span>

#include "common/base/logging.h"
#include "engine/sampling/logits_processor.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_conditions.h"

namespace pdspark::serving {

SpecPolicy::SpecPolicy(const ServingOptions& options, engine::Model& model,
                       std::vector<int32_t> eos_ids, int64_t max_model_len)
    : options_(options),
      model_(model),
      eos_ids_(std::move(eos_ids)),
      max_model_len_(max_model_len),
      draft_timer_(model.backend(0).NewTimer()) {
  if (!enabled() || !options_.spec_auto) return;
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
    costs_ = *options_.spec_auto_costs;
    return;
  }
  auto costs = SpecCostModel::Measure(model, *options_.drafter,
                                      std::min<int64_t>(options_.max_num_seqs, 128));
  if (costs.ok()) {
    costs_ = std::move(costs).value();
    LOG_INFO("dspark auto cost profile (ms) {}", costs_.Describe());
  } else {
    LOG_WARN("dspark auto cost profile failed, scheduling without it error={}",
             costs.status().ToString());
  }
}

void SpecPolicy::ObserveTarget(int64_t sequences, int64_t rows, double seconds) {
  costs_.ObserveTarget(sequences, rows, seconds);
}

void SpecPolicy::ObserveDecodeStep(int64_t sequences, bool drafted, double committed,
                                   double seconds) {
  guard_.Observe(sequences, drafted, committed, seconds);
}

std::optional<std::vector<double>> SpecPolicy::ObserveVerify(const ActiveRequest& request,
                                                             int64_t gamma, int64_t accepted) {
  if (!options_.spec_auto) return std::nullopt;
  dspark::ConfidenceCalibration& calibration = Calibration(request);
  calibration.Observe(request.draft_logits, gamma, accepted);
  if (!request.sampler->greedy()) return std::nullopt;
  return calibration.temperatures();
}

// Draft tokens for this request's next round; 0 means a plain decode step. Never drafts past
// max_tokens or the model length (the round emits up to gamma + 1 tokens).
int64_t SpecPolicy::DraftLength(const ActiveRequest& r) const {
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
// suppression, the grammar, temperature, top-k/p/min-p). Under coupled acceptance (and when
// greedy) a draft is drawn as plain decoding draws the token at its position, with the Gumbel
// noise of (seed, position) (Sampler::SampleFromLogits), where the logits are unless something
// must be masked: the verify round accepts it when the target draws the same token there. Under
// rejection sampling it is drawn from q by the request's sampler, q kept for the acceptance
// rule to divide by.
bool SpecPolicy::DraftAll(const RunningRequests& running) {
  std::vector<ActiveRequest*> candidates;
  std::vector<int64_t> caps;
  for (auto& r : running) {
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
  std::vector<ActiveRequest*> drafting;
  std::vector<int64_t> gammas;
  if (options_.spec_auto) {
    ChooseDrafting(running, candidates, caps, drafting, gammas);
  } else {
    drafting = candidates;
    gammas = caps;
  }
  if (drafting.empty()) return false;
  std::vector<dspark::DraftInput> inputs;
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < drafting.size(); ++i) {
    ActiveRequest* req = drafting[i];
    CatchUpRing(*req);
    dspark::DraftInput in;
    in.state = req->drafter_state.get();
    in.anchor_token = req->tokens.back();
    in.gamma = gammas[i];
    const int64_t first_position = static_cast<int64_t>(req->tokens.size());
    const bool coupled = sampling::DrawsCoupled(*req->sampler, options_.spec_acceptance);
    if (coupled && !req->grammar && req->generated >= req->spec.sampling.min_tokens) {
      // Nothing to mask: drawn where the logits are.
      for (int64_t k = 0; k < in.gamma; ++k) {
        in.draws.push_back(req->sampler->GumbelDraw(first_position + k));
      }
      inputs.push_back(std::move(in));
      continue;
    }
    // Structured output: each slot masked by the grammar after the slots before it.
    in.choose = [this, req, first_position, coupled, vocab, grammar = req->grammar](
                    int64_t slot, std::span<float> logits) mutable {
      sampling::SuppressStopTokens(req->spec.sampling, eos_ids_,
                                   static_cast<int32_t>(req->generated + slot), logits);
      if (grammar) options_.vocabulary->Mask(*grammar, eos_ids_, logits);
      int32_t token = 0;
      if (coupled) {
        token = req->sampler->SampleFromLogits(logits, first_position + slot);
      } else {
        const size_t at = req->draft_probs.size();
        req->draft_probs.resize(at + vocab);
        std::span<float> q(req->draft_probs.data() + at, vocab);
        req->sampler->ProcessLogits(logits, q);
        token = req->sampler->Sample(q);
      }
      if (grammar && !options_.vocabulary->Accept(*grammar, token, eos_ids_)) grammar.reset();
      return token;
    };
    inputs.push_back(std::move(in));
  }
  draft_timer_->Start();
  std::vector<dspark::DraftOutput> drafts = options_.drafter->Draft(inputs);
  if (options_.spec_auto) {
    costs_.ObserveDraft(static_cast<int64_t>(inputs.size()),
                        *std::max_element(gammas.begin(), gammas.end()), draft_timer_->Stop());
  }
  for (size_t i = 0; i < drafting.size(); ++i) drafting[i]->draft = drafts[i].tokens;
  if (options_.spec_auto) ScheduleVerifyLengths(running, drafting, drafts);
  return true;
}

// The decode part of the step without drafts, as PlanStep will build it: every decoding request
// feeds one token and commits one. Prefill chunks that share the step are left out: their rows
// commit no token, so counting them would make the plain step look slow and every verify row
// look worth its cost; verify rows are judged against plain decoding. (They come first in the
// token budget, so the prefill chunks do not limit them either.)
dspark::StepBase SpecPolicy::BaseOfStep(const RunningRequests& running) const {
  dspark::StepBase base;
  base.max_rows = options_.max_batch_tokens;
  for (const auto& r : running) {
    if (r->done || !r->started || r->pending() != 1) continue;
    ++base.sequences;
    ++base.rows;
    base.tokens += 1;
  }
  return base;
}

dspark::ConfidenceCalibration& SpecPolicy::Calibration(const ActiveRequest& request) {
  return calibration_[request.sampler->greedy() ? 0 : 1];
}

// auto, before drafting: PlanDrafts on each candidate's predicted survivals and the measured
// costs decides whether drafting pays this step, for whom and with how many slots; the
// DraftingGuard vetoes the plan where drafting steps of this batch size have realized fewer
// tokens per CPU-second than plain ones. When drafting does not happen, it stops except for
// probes — the vetoed plan, or else a full draft of two candidates (round robin), after 8 idle
// steps, the gap doubling up to 1024 while probes keep showing it does not pay — which keep the
// predictions, the calibration and the guard's figures following the workload.
void SpecPolicy::ChooseDrafting(const RunningRequests& running,
                                const std::vector<ActiveRequest*>& candidates,
                                const std::vector<int64_t>& caps,
                                std::vector<ActiveRequest*>& drafting,
                                std::vector<int64_t>& gammas) {
  constexpr int64_t kFirstProbeGap = 8, kMaxProbeGap = 1024;
  constexpr size_t kProbeRequests = 2;
  std::vector<std::vector<double>> predicted;
  for (ActiveRequest* r : candidates) {
    predicted.push_back(r->predicted_survival.empty()
                            ? prior_survival_[r->sampler->greedy() ? 0 : 1]
                            : r->predicted_survival);
  }
  // A candidate's ring catches up with the positions it holds back before it can draft.
  std::vector<double> setup;
  for (ActiveRequest* r : candidates)
    setup.push_back(costs_.ContextSeconds(r->pending_context->held()));
  const int64_t block = options_.drafter->block_size();
  const dspark::StepBase base = BaseOfStep(running);
  dspark::DraftPlan plan = dspark::PlanDrafts(
      predicted, caps, block, base,
      [this](int64_t s, int64_t rows) { return costs_.TargetSeconds(s, rows); },
      [this](int64_t r, int64_t g) { return costs_.DraftSeconds(r, g); },
      options_.spec_auto_min_survival, options_.spec_auto_min_speedup, setup);
  // Unprofiled, drafting is free by definition: nothing to guard.
  const bool vetoed = plan.gamma > 0 && costs_.profiled() && !guard_.AllowDrafting(base.sequences);
  if (plan.gamma > 0 && !vetoed) {
    idle_steps_ = 0;
    probe_gap_ = kFirstProbeGap;
  } else {
    if (++idle_steps_ < std::max(probe_gap_, kFirstProbeGap)) return;
    idle_steps_ = 0;
    probe_gap_ = std::min(2 * std::max(probe_gap_, kFirstProbeGap), kMaxProbeGap);
    if (!vetoed) {
      plan.gamma = block;
      for (size_t i = 0; i < std::min(kProbeRequests, candidates.size()); ++i) {
        plan.requests.push_back(probe_cursor_++ % candidates.size());
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
// does), and every verified draft stays an exact sample of its q. (Under coupled acceptance the
// emitted tokens are plain decoding's whatever is verified.)
void SpecPolicy::ScheduleVerifyLengths(const RunningRequests& running,
                                       const std::vector<ActiveRequest*>& drafting,
                                       const std::vector<dspark::DraftOutput>& drafts) {
  std::vector<std::vector<double>> survival;
  for (size_t i = 0; i < drafting.size(); ++i) {
    ActiveRequest& r = *drafting[i];
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
      survival, BaseOfStep(running),
      [this](int64_t s, int64_t rows) { return costs_.TargetSeconds(s, rows); },
      options_.spec_auto_min_survival);
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < drafting.size(); ++i) {
    drafting[i]->draft.resize(lengths[i]);
    if (!drafting[i]->draft_probs.empty()) drafting[i]->draft_probs.resize(lengths[i] * vocab);
  }
}

int64_t SpecPolicy::FeatureWidth() const {
  return options_.drafter ? options_.drafter->num_feature_layers() * model_.config().hidden_size
                          : 0;
}

int64_t SpecPolicy::RingPositions(const ActiveRequest& r) const {
  return r.drafter_state->num_positions() + r.pending_context->positions();
}

// The drafter context of a position is only needed once the request drafts or ships its ring,
// so it is appended then (see PendingContext).
void SpecPolicy::CatchUpRing(ActiveRequest& r) const {
  r.pending_context->Flush(*options_.drafter, *r.drafter_state);
}

Status SpecPolicy::TruncateRing(ActiveRequest& r, int64_t positions) const {
  const int64_t appended = r.drafter_state->num_positions();
  if (positions >= appended) return r.pending_context->Truncate(positions - appended);
  RETURN_IF_ERROR(r.pending_context->Truncate(0));
  return r.drafter_state->Truncate(positions);
}

}  // namespace pdspark::serving
