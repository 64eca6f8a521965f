// Lossless acceptance of DSpark draft tokens against the target's verify pass
// (dspark_dsv4.md B.2): the emitted tokens are distributed exactly as if drawn from the target
// one at a time. Sampled drafts are judged by the standard speculative rejection sampler, or by
// the coupled rule (drafts and target drawn with the same Gumbel noise); greedy mode accepts the
// longest prefix that matches the target's argmax.
//
// Indexing follows Part B: the verify pass feeds [x0, d_1, ..., d_L] and returns rows
// p_0..p_L, where p_j is the distribution of the token after input j. So d_k is judged
// against p_{k-1}, and p_L gives the bonus token when every draft is accepted.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "engine/sampling/sampler.h"

namespace pdspark::sampling {

// How a sampled request's drafts are judged (greedy ones: the greedy rule either way):
// - kRejection: AcceptRejectionSampling against the draft's q (the most drafts accepted; the
//   verify rows and the drafter's rows come to the host);
// - kCoupled: AcceptCoupled, drafts and target drawn with the same Gumbel noise (fewer accepted;
//   everything stays where the logits are, and the tokens are plain decoding's).
enum class SpecAcceptance { kRejection, kCoupled };

// Whether `sampler`'s drafts are drawn and judged by AcceptCoupled: greedy, or coupled sampling.
inline bool DrawsCoupled(const Sampler& sampler, SpecAcceptance acceptance) {
  return sampler.greedy() || acceptance == SpecAcceptance::kCoupled;
}

// Draft probabilities are clamped to at least this before dividing (as in DeepSpec).
inline constexpr double kMinDraftProb = 1e-8;
// A residual with at most this mass is numerically empty; fall back to the target row.
inline constexpr double kMinResidualMass = 1e-8;

// One request's verify round as flat row-major buffers (rows of vocab_size floats).
struct DraftVerification {
  std::span<const int32_t> draft_tokens = {};  // d_1..d_L; L may be 0 (plain decoding).
  // q_1..q_L: row k-1 is exactly the distribution d_k was drawn from (same temperature and
  // masks as the target). Empty means a deterministic draft: q_k is one-hot on d_k.
  std::span<const float> draft_probs = {};
  // p_0..p_L (L + 1 rows), after the request's ProcessLogits. Greedy mode only takes the argmax
  // of each row, so raw logits work there too.
  std::span<const float> target_probs = {};
  int64_t vocab_size = 0;
};

struct AcceptanceResult {
  int32_t num_accepted = 0;     // a: how many drafts were accepted.
  std::vector<int32_t> tokens;  // d_1..d_a then the correction (a < L) or bonus (a = L).
};

// Checks buffer sizes and token ranges; InvalidArgument naming the field otherwise.
Status ValidateDraftVerification(const DraftVerification& input);

// Greedy rule: accept d_k while d_k == argmax p_{k-1}; then emit argmax p_a.
StatusOr<AcceptanceResult> AcceptGreedy(const DraftVerification& input);
// Coupled rule, from the tokens t_0..t_L that plain decoding would draw from rows p_0..p_L
// (L + 1 of them): accept d_k while d_k == t_{k-1}; then emit t_a. The greedy rule when t_k is
// argmax p_k. Sampled, it is lossless when t_k is the Gumbel-max draw of p_k with the noise of
// its position, (seed, position) alone, and the drafter drew d_{k+1} with the same noise (what
// the serving engine does, Sampler::SampleFromLogits): the emitted tokens are then the tokens
// plain decoding emits, whatever the drafts (drafter-invariant speculative decoding, Daliri,
// Musco and Suresh 2024). A draft is accepted with probability at least (1 - TV) / (1 + TV)
// against rejection sampling's 1 - TV (TV: the total variation between p and q); in exchange
// the rule reads only the rows' drawn ids, which a GPU finds where the logits are
// (engine::StepOptions::argmax_only), and the drafter's q never leaves the drafter.
AcceptanceResult AcceptCoupled(std::span<const int32_t> draft_tokens,
                               std::span<const int32_t> target_tokens);

// Rejection sampling: accept d_k with probability min(1, p_{k-1}(d_k) / q_k(d_k)); at the first
// rejection emit a sample of norm(max(0, p_{k-1} - q_k)); if all are accepted emit a sample of
// p_L. Consumes one uniform per judged draft plus one draw for the final token.
StatusOr<AcceptanceResult> AcceptRejectionSampling(const DraftVerification& input,
                                                   Sampler& sampler);

}  // namespace pdspark::sampling
