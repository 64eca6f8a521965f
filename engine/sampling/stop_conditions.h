// End-of-generation checks on the tokens a step emitted. A speculative round can emit several
// tokens at once, so the list is cut right after the first stop token (kept, as in vLLM's
// output ids) or at max_tokens, and nothing after the cut is committed (B.2 "Stop tokens").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/sampling_params.h"
#include "engine/sampling/speculative_acceptance.h"

namespace pdspark::sampling {

enum class FinishReason {
  kNone,    // Keep generating.
  kStop,    // Emitted an EOS (unless ignore_eos) or one of stop_token_ids.
  kLength,  // Reached max_tokens.
};

// min_tokens: while fewer than params.min_tokens tokens exist, sets the logits of EOS (unless
// ignore_eos) and of stop_token_ids to -inf, as vLLM does. `num_generated` counts the tokens
// generated before the position these logits predict. Apply it to the draft and the target
// logits of every verified position alike, so q and p stay the distributions actually used.
void SuppressStopTokens(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
                        int32_t num_generated, std::span<float> logits);

// Truncates `tokens` (this step's output) given that `num_generated` tokens were generated
// before it. A stop token at or before the max_tokens limit wins over kLength; a stop token
// that lands before min_tokens does not stop (SuppressStopTokens normally keeps it out).
FinishReason ApplyStopConditions(const SamplingParams& params,
                                 std::span<const int32_t> eos_token_ids, int32_t num_generated,
                                 std::vector<int32_t>* tokens);

// Same on a verify round's result; num_accepted is cut to the drafts that survived (the
// correction/bonus token is the last one, so a cut inside the drafts removes it).
FinishReason ApplyStopConditions(const SamplingParams& params,
                                 std::span<const int32_t> eos_token_ids, int32_t num_generated,
                                 AcceptanceResult* result);

}  // namespace pdspark::sampling
