#include "engine/sampling/speculative_acceptance.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/sampling/logits_processor.h"

namespace pdspark::sampling {
namespace {

std::span<const float> Row(std::span<const float> rows, int64_t vocab_size, size_t index) {
  return rows.subspan(index * vocab_size, vocab_size);
}

// Probability the draft assigned to its own token: from q, or 1 for a deterministic draft.
double DraftProb(const DraftVerification& input, size_t k) {
  if (input.draft_probs.empty()) return 1.0;
  return Row(input.draft_probs, input.vocab_size, k)[input.draft_tokens[k]];
}

// Samples from norm(max(0, p - q)), or from p when that residual is numerically empty
// (p and q nearly equal, so rejection was a rounding artefact).
int32_t SampleResidual(const DraftVerification& input, size_t k, Sampler& sampler) {
  const std::span<const float> p = Row(input.target_probs, input.vocab_size, k);
  std::vector<float> residual(p.begin(), p.end());
  if (input.draft_probs.empty()) {
    residual[input.draft_tokens[k]] = 0.0f;  // max(0, p - onehot(d)).
  } else {
    const std::span<const float> q = Row(input.draft_probs, input.vocab_size, k);
    for (size_t i = 0; i < residual.size(); ++i) residual[i] = std::max(0.0f, p[i] - q[i]);
  }
  double mass = 0.0;
  for (float r : residual) mass += r;
  return sampler.Sample(mass > kMinResidualMass ? std::span<const float>(residual) : p);
}

}  // namespace

Status ValidateDraftVerification(const DraftVerification& input) {
  if (input.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size must be > 0, got ", input.vocab_size));
  }
  const size_t num_drafts = input.draft_tokens.size();
  const size_t vocab = static_cast<size_t>(input.vocab_size);
  if (input.target_probs.size() != (num_drafts + 1) * vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target_probs must hold (num_drafts + 1) * vocab_size = ", (num_drafts + 1) * vocab,
        " floats, got ", input.target_probs.size()));
  }
  if (!input.draft_probs.empty() && input.draft_probs.size() != num_drafts * vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft_probs must be empty or hold num_drafts * vocab_size = ", num_drafts * vocab,
        " floats, got ", input.draft_probs.size()));
  }
  for (int32_t token : input.draft_tokens) {
    if (token < 0 || token >= input.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_tokens must be in [0, vocab_size), got ", token));
    }
  }
  return absl::OkStatus();
}

StatusOr<AcceptanceResult> AcceptGreedy(const DraftVerification& input) {
  RETURN_IF_ERROR(ValidateDraftVerification(input));
  std::vector<int32_t> target(input.draft_tokens.size() + 1);
  for (size_t k = 0; k < target.size(); ++k) {
    target[k] = Argmax(Row(input.target_probs, input.vocab_size, k));
  }
  return AcceptCoupled(input.draft_tokens, target);
}

AcceptanceResult AcceptCoupled(std::span<const int32_t> draft_tokens,
                               std::span<const int32_t> target_tokens) {
  AcceptanceResult result;
  const size_t num_drafts = draft_tokens.size();
  for (size_t k = 0; k <= num_drafts && k < target_tokens.size(); ++k) {
    result.tokens.push_back(target_tokens[k]);
    if (k == num_drafts || draft_tokens[k] != target_tokens[k]) break;
    ++result.num_accepted;
  }
  return result;
}

StatusOr<AcceptanceResult> AcceptRejectionSampling(const DraftVerification& input,
                                                   Sampler& sampler) {
  RETURN_IF_ERROR(ValidateDraftVerification(input));
  AcceptanceResult result;
  const size_t num_drafts = input.draft_tokens.size();
  for (size_t k = 0; k < num_drafts; ++k) {
    const int32_t draft = input.draft_tokens[k];
    const double p = Row(input.target_probs, input.vocab_size, k)[draft];
    const double q = std::max(DraftProb(input, k), kMinDraftProb);
    // u < min(1, p / q) written without the division; u < 1 always, so p >= q accepts.
    if (sampler.Uniform() * q >= p) {
      result.tokens.push_back(SampleResidual(input, k, sampler));
      return result;
    }
    result.tokens.push_back(draft);
    ++result.num_accepted;
  }
  result.tokens.push_back(sampler.Sample(Row(input.target_probs, input.vocab_size, num_drafts)));
  return result;
}

}  // namespace pdspark::sampling
