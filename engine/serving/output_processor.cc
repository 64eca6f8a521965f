#include "engine/serving/output_processor.h"

#include <span>

#include "engine/sampling/speculative_acceptance.h"

namespace pdspark::serving {

Emission OutputProcessor::Sample(ActiveRequest& request, const float* logits_row) const {
  std::vector<float> logits(logits_row, logits_row + vocab_);
  sampling::SuppressStopTokens(request.spec.sampling, eos_ids_,
                               static_cast<int32_t>(request.generated), logits);
  Emission out;
  out.tokens.push_back(request.sampler->SampleFromLogits(logits));
  out.reason = sampling::ApplyStopConditions(request.spec.sampling, eos_ids_,
                                             static_cast<int32_t>(request.generated), &out.tokens);
  return out;
}

// Commits exactly the accepted positions: the target state and the drafter ring are truncated
// to the anchor plus the accepted drafts; the correction/bonus token is fed next round.
StatusOr<Emission> OutputProcessor::Verify(ActiveRequest& r, const float* logits) const {
  const int64_t gamma = static_cast<int64_t>(r.draft.size());
  const int64_t anchor_position = static_cast<int64_t>(r.tokens.size()) - 1;
  std::vector<float> target(logits, logits + (gamma + 1) * vocab_);
  for (int64_t k = 0; k <= gamma; ++k) {
    std::span<float> row(target.data() + k * vocab_, vocab_);
    sampling::SuppressStopTokens(r.spec.sampling, eos_ids_, static_cast<int32_t>(r.generated + k),
                                 row);
    if (!r.sampler->greedy())
      r.sampler->ProcessLogits(std::vector<float>(row.begin(), row.end()), row);
  }
  sampling::DraftVerification v;
  v.draft_tokens = r.draft;
  v.draft_probs = r.draft_probs;
  v.target_probs = target;
  v.vocab_size = vocab_;
  ASSIGN_OR_RETURN(auto result, sampling::AcceptDraftTokens(v, *r.sampler));
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
  return out;
}

}  // namespace pdspark::serving
