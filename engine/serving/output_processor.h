// What a step's logits make of a request (vLLM's output processor): its next token, sampled
// with the request's own logits processing and seeded sampler, or a DSpark verify round's
// accepted drafts (the acceptance rule, then the target state and the drafter ring rolled back
// to what was accepted), with the stop conditions applied. The engine turns the result into
// the request's event.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/speculative_acceptance.h"
#include "engine/sampling/stop_conditions.h"
#include "engine/sampling/token_vocabulary.h"
#include "engine/serving/active_request.h"
#include "engine/serving/speculation/spec_policy.h"

namespace pdspark::serving {

struct Emission {
  std::vector<int32_t> tokens;
  std::vector<sampling::TokenLogprob> logprobs;  // one per token when the request asks
  sampling::FinishReason reason = sampling::FinishReason::kNone;
  // A verify round: drafts verified and accepted (gamma = 0 for a plain step).
  int64_t gamma = 0, accepted = 0;
};

class OutputProcessor {
 public:
  OutputProcessor(int64_t vocab, std::vector<int32_t> eos_ids, SpecPolicy* spec,
                  const sampling::TokenVocabulary* vocabulary, sampling::SpecAcceptance acceptance)
      : vocab_(vocab),
        eos_ids_(std::move(eos_ids)),
        spec_(spec),
        vocabulary_(vocabulary),
        acceptance_(acceptance) {}

  // Structured output: refused without a vocabulary to mask with; a started request's matcher
  // is moved past the tokens it already has (a disaggregated first token, a failover's).
  Status CanConstrain(const sampling::SamplingParams& params) const;
  void StartGrammar(ActiveRequest& request) const;

  // A plain step: the request's row of logits.
  Emission Sample(ActiveRequest& request, const float* logits) const;
  // A verify round: rows p_0..p_gamma of [anchor, d_1..d_gamma]. Counts the round in the
  // request's SpecStats and clears its drafts.
  StatusOr<Emission> Verify(ActiveRequest& request, const float* logits) const;
  // Whether the request's next tokens are its rows' argmax, with nothing else read from the
  // logits: greedy, or sampled with each row perturbed first for its ArgmaxDraws (drafts only
  // under coupled acceptance); no logprobs, no logit adjustments, no grammar, past min_tokens. Then
  // SampleArgmax and VerifyArgmax give what Sample and Verify would, from the argmax ids alone.
  bool ArgmaxSuffices(const ActiveRequest& request) const;
  // The Gumbel-max draws of the tokens the request's rows sample (inv_temperature 0: greedy):
  // its next token's, or in a verify round one per row p_0..p_gamma.
  std::vector<kernels::GumbelRow> ArgmaxDraws(const ActiveRequest& request) const;
  Emission SampleArgmax(ActiveRequest& request, int32_t argmax) const;
  // `argmax`: the ids of rows p_0..p_gamma.
  StatusOr<Emission> VerifyArgmax(ActiveRequest& request, const int32_t* argmax) const;
  // A step fed `count` tokens from position `first_position` with one row of logits each: the
  // logprobs of the prompt tokens they predict, kept for the first token's event.
  void AddPromptLogprobs(ActiveRequest& request, const float* rows, int64_t first_position,
                         int64_t count) const;

 private:
  // The request's penalties, logit bias and bad words on the row that follows its generated
  // tokens and the first `drafts` drafts of this round.
  void Adjust(const ActiveRequest& request, int64_t drafts, std::span<float> row) const;
  // Moves the request's grammar past tokens it emitted.
  void AdvanceGrammar(ActiveRequest& request, const std::vector<int32_t>& tokens) const;
  // A verify round's outcome committed: stats, stop conditions, the target state and the
  // drafter ring truncated to what was accepted, the grammar and logprobs (rows: the round's
  // logits, null when the request asks for no logprobs).
  StatusOr<Emission> CommitRound(ActiveRequest& request, sampling::AcceptanceResult result,
                                 const float* rows) const;
  // The request's logprobs of out->tokens, token k from row k (none when it asks for none).
  void AddLogprobs(const ActiveRequest& request, const float* rows, Emission* out) const;

  const int64_t vocab_;
  const std::vector<int32_t> eos_ids_;
  SpecPolicy* spec_;
  const sampling::TokenVocabulary* vocabulary_;
  const sampling::SpecAcceptance acceptance_;
};

}  // namespace pdspark::serving
