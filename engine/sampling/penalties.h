// What a request asks to change in the target's logits before sampling, beyond the stop-token
// suppression (vLLM's order: logit_bias and bad_words, then the repetition, frequency and presence
// penalties; temperature and the masks come after, in logits_processor). The speculative verifier
// applies it to each verified row with that row's own context (the drafts before it count as
// output), so the distribution it accepts against is the one plain decoding samples from and
// sampling stays lossless.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace pdspark::sampling {

// Whether `params` asks for any of it (else the row is left untouched, as fast as before).
bool HasLogitAdjustments(const SamplingParams& params);

// Adjusts `logits` for the position after `prompt` + `output`:
//  - logit_bias: added to its tokens' logits;
//  - bad_words: a token sequence whose last token is banned (-inf) where `output` ends with the
//    rest of it (a one-token sequence is banned everywhere);
//  - repetition_penalty r: tokens in the prompt or the output have a positive logit divided by
//    r, a negative one multiplied by r;
//  - frequency_penalty f and presence_penalty p: each token's logit loses f times its count in
//    the output, and p when it occurs there at all.
void ApplyLogitAdjustments(const SamplingParams& params, std::span<const int32_t> prompt,
                           std::span<const int32_t> output, std::span<float> logits);

}  // namespace pdspark::sampling
