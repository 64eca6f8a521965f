#include "engine/serving/output_processor.h"

#include <algorithm>
#include <optional>
#include <span>

#include "engine/sampling/penalties.h"

namespace pdspark::serving {

Emission OutputProcessor::Sample(ActiveRequest& request, const float* logits_row) const {
  std::vector<float> logits(logits_row, logits_row + vocab_);
  sampling::SuppressStopTokens(request.spec.sampling, eos_ids_,
                               static_cast<int32_t>(request.generated), logits);
  Adjust(request, 0, logits);
  if (request.grammar) vocabulary_->Mask(*request.grammar, eos_ids_, logits);
  Emission out;
  out.tokens.push_back(
      request.sampler->SampleFromLogits(logits, static_cast<int64_t>(request.tokens.size())));
  out.reason = sampling::ApplyStopConditions(request.spec.sampling, eos_ids_,
                                             static_cast<int32_t>(request.generated), &out.tokens);
  AdvanceGrammar(request, out.tokens);
  AddLogprobs(request, logits_row, &out);
  return out;
}

// Commits exactly the accepted positions: the target state and the drafter ring are truncated
// to the anchor plus the accepted drafts; the correction/bonus token is fed next round.
StatusOr<Emission> OutputProcessor::Verify(ActiveRequest& r, const float* logits) const {
  const int64_t gamma = static_cast<int64_t>(r.draft.size());
  std::vector<float> target(logits, logits + (gamma + 1) * vocab_);
  // The grammar after the drafts before each row; once a draft is refused, the rows after it
  // are never used (the acceptance stops at that draft).
  std::optional<structured::GrammarMatcher> grammar = r.grammar;
  for (int64_t k = 0; k <= gamma; ++k) {
    std::span<float> row(target.data() + k * vocab_, vocab_);
    sampling::SuppressStopTokens(r.spec.sampling, eos_ids_, static_cast<int32_t>(r.generated + k),
                                 row);
    Adjust(r, k, row);
    if (grammar) {
      vocabulary_->Mask(*grammar, eos_ids_, row);
      if (k < gamma && !vocabulary_->Accept(*grammar, r.draft[k], eos_ids_)) grammar.reset();
    }
  }
  if (sampling::DrawsCoupled(*r.sampler, acceptance_)) {
    // Row k draws the token at position anchor + 1 + k as plain decoding would, with the noise
    // the drafter drew d_{k+1} with.
    const int64_t first_position = static_cast<int64_t>(r.tokens.size());
    std::vector<int32_t> drawn(gamma + 1);
    for (int64_t k = 0; k <= gamma; ++k) {
      drawn[k] = r.sampler->SampleFromLogits(
          std::span<const float>(target.data() + k * vocab_, vocab_), first_position + k);
    }
    return CommitRound(r, sampling::AcceptCoupled(r.draft, drawn), logits);
  }
  for (int64_t k = 0; k <= gamma; ++k) {
    std::span<float> row(target.data() + k * vocab_, vocab_);
    r.sampler->ProcessLogits(std::vector<float>(row.begin(), row.end()), row);
  }
  sampling::DraftVerification v;
  v.draft_tokens = r.draft;
  v.draft_probs = r.draft_probs;
  v.target_probs = target;
  v.vocab_size = vocab_;
  ASSIGN_OR_RETURN(auto result, sampling::AcceptRejectionSampling(v, *r.sampler));
  return CommitRound(r, std::move(result), logits);
}

bool OutputProcessor::ArgmaxSuffices(const ActiveRequest& request) const {
  const sampling::SamplingParams& params = request.spec.sampling;
  const bool drawn = request.draft.empty() || sampling::DrawsCoupled(*request.sampler, acceptance_);
  return drawn && params.logprobs < 0 && params.prompt_logprobs < 0 &&
         !sampling::HasLogitAdjustments(params) && !request.grammar &&
         request.generated >= params.min_tokens;  // no stop token suppressed (SuppressStopTokens)
}

std::vector<kernels::GumbelRow> OutputProcessor::ArgmaxDraws(const ActiveRequest& request) const {
  // The positions of the tokens its rows sample, as Sample and Verify pass them.
  const int64_t first_position = static_cast<int64_t>(request.tokens.size());
  std::vector<kernels::GumbelRow> draws;
  for (size_t k = 0; k <= request.draft.size(); ++k) {
    draws.push_back(request.sampler->GumbelDraw(first_position + static_cast<int64_t>(k)));
  }
  return draws;
}

Emission OutputProcessor::SampleArgmax(ActiveRequest& request, int32_t argmax) const {
  Emission out;
  out.tokens.push_back(argmax);
  out.reason = sampling::ApplyStopConditions(request.spec.sampling, eos_ids_,
                                             static_cast<int32_t>(request.generated), &out.tokens);
  return out;
}

StatusOr<Emission> OutputProcessor::VerifyArgmax(ActiveRequest& r, const int32_t* argmax) const {
  return CommitRound(
      r, sampling::AcceptCoupled(r.draft, std::span<const int32_t>(argmax, r.draft.size() + 1)),
      nullptr);
}

StatusOr<Emission> OutputProcessor::CommitRound(ActiveRequest& r, sampling::AcceptanceResult result,
                                                const float* rows) const {
  const int64_t gamma = static_cast<int64_t>(r.draft.size());
  const int64_t anchor_position = static_cast<int64_t>(r.tokens.size()) - 1;
  Emission out;
  out.gamma = gamma;
  out.accepted = result.num_accepted;
  r.spec_stats.AddRound(gamma, out.accepted);
  out.reason = sampling::ApplyStopConditions(r.spec.sampling, eos_ids_,
                                             static_cast<int32_t>(r.generated), &result);
  const int64_t committed = anchor_position + 1 + out.accepted;
  Status st_target = r.state->Truncate(committed);
  Status st_drafter = spec_->TruncateRing(r, committed);
  r.draft.clear();
  r.draft_probs.clear();
  RETURN_IF_ERROR(st_target);
  RETURN_IF_ERROR(st_drafter);
  out.tokens = std::move(result.tokens);
  AdvanceGrammar(r, out.tokens);
  if (rows) AddLogprobs(r, rows, &out);
  return out;
}

Status OutputProcessor::CanConstrain(const sampling::SamplingParams& params) const {
  if (params.grammar && vocabulary_ == nullptr) {
    return absl::InvalidArgumentError(
        "structured output needs the checkpoint's tokenizer.json, which this worker did not load");
  }
  return absl::OkStatus();
}

void OutputProcessor::StartGrammar(ActiveRequest& request) const {
  if (!request.spec.sampling.grammar) return;
  request.grammar.emplace(request.spec.sampling.grammar);
  AdvanceGrammar(request, request.spec.generated);
}

void OutputProcessor::AdvanceGrammar(ActiveRequest& request,
                                     const std::vector<int32_t>& tokens) const {
  if (!request.grammar) return;
  for (int32_t token : tokens) {
    vocabulary_->Accept(*request.grammar, token, eos_ids_);  // refused: dead, only the end left
  }
}

void OutputProcessor::Adjust(const ActiveRequest& request, int64_t drafts,
                             std::span<float> row) const {
  const sampling::SamplingParams& params = request.spec.sampling;
  if (!sampling::HasLogitAdjustments(params)) return;
  // The row's context: the generated tokens, and in a verify round the drafts before it.
  std::vector<int32_t> output(request.tokens.begin() + request.spec.prompt.size(),
                              request.tokens.end());
  output.insert(output.end(), request.draft.begin(), request.draft.begin() + drafts);
  sampling::ApplyLogitAdjustments(params, request.spec.prompt, output, row);
}

void OutputProcessor::AddLogprobs(const ActiveRequest& request, const float* rows,
                                  Emission* out) const {
  const int32_t top = request.spec.sampling.logprobs;
  if (top < 0) return;
  for (size_t k = 0; k < out->tokens.size(); ++k) {
    out->logprobs.push_back(sampling::ComputeTokenLogprob(
        std::span<const float>(rows + k * vocab_, vocab_), out->tokens[k], top));
  }
}

void OutputProcessor::AddPromptLogprobs(ActiveRequest& request, const float* rows,
                                        int64_t first_position, int64_t count) const {
  const int32_t top = request.spec.sampling.prompt_logprobs;
  if (top < 0 || request.spec.prefilled) return;
  const std::vector<int32_t>& prompt = request.spec.prompt;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t next = first_position + i + 1;  // the token position i's row predicts
    if (next >= static_cast<int64_t>(prompt.size())) break;
    request.prompt_logprobs.push_back(sampling::ComputeTokenLogprob(
        std::span<const float>(rows + i * vocab_, vocab_), prompt[next], top));
  }
}

}  // namespace pdspark::serving
