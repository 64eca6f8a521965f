// Turns one row of logits into the sampling distribution of a request: temperature, then
// top-k, top-p and min-p masks, then renormalisation (vLLM's order). The speculative verifier
// needs the *exact* distribution a token is drawn from, so this is the single implementation
// used for both the draft distributions q and the target distributions p.
//
// Masked tokens get probability exactly 0. Ties are broken towards the lower token id so the
// result does not depend on sort stability.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace pdspark::sampling {

// Index of the largest value; the lowest index among equal maxima; -1 when empty.
// NaN entries are never selected unless every entry is NaN (then 0).
int32_t Argmax(std::span<const float> values);

// Writes softmax(logits / temperature) into `probs` (same size; temperature > 0).
// -inf (and NaN) logits get probability 0. If no logit is finite, the result is one-hot on
// Argmax(logits) rather than NaN.
void SoftmaxWithTemperature(std::span<const float> logits, float temperature,
                            std::span<float> probs);

// The masks work in place on a (possibly unnormalised) non-negative weight vector and do not
// renormalise; ProcessLogits renormalises once at the end.

// Keeps every token whose weight is >= the k-th largest weight (ties at the threshold are
// kept, like vLLM's threshold compare); k <= 0 or k >= size is a no-op.
void ApplyTopK(std::span<float> probs, int32_t k);

// Keeps the smallest set of most likely tokens whose mass is >= top_p of the current total:
// a token is kept iff the mass of the tokens ranked above it is < top_p * total.
void ApplyTopP(std::span<float> probs, float top_p);

// Keeps tokens with weight >= min_p * max weight.
void ApplyMinP(std::span<float> probs, float min_p);

// Scales the weights to sum to 1 (accumulating in double). A zero vector is left unchanged.
void Normalize(std::span<float> probs);

// The full pipeline. Greedy params give a one-hot distribution on Argmax(logits).
// `probs` must have logits.size() entries.
void ProcessLogits(std::span<const float> logits, const SamplingParams& params,
                   std::span<float> probs);
std::vector<float> ProcessLogits(std::span<const float> logits, const SamplingParams& params);

// ProcessLogits on each row of a row-major [rows, vocab_size] buffer, e.g. the verify pass's
// L + 1 target rows or the drafter's L rows. `probs` has the same size as `logits`.
void ProcessLogitsRows(std::span<const float> logits, int64_t vocab_size,
                       const SamplingParams& params, std::span<float> probs);

}  // namespace pdspark::sampling
