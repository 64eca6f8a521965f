// Log-probabilities a request asks to see (OpenAI `logprobs` / `top_logprobs`, vLLM
// `prompt_logprobs`): log-softmax of the target model's raw logits at a position (before
// temperature, penalties and masks, as vLLM's default `raw_logprobs` mode), the chosen token's
// value and rank, and the most likely tokens. Under DSpark the verify pass's row for an accepted
// position is the target's logits at that position, so the values equal a run without drafts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pdspark::sampling {

// The most top tokens a request may ask for (vLLM's default --max-logprobs, OpenAI's limit for
// chat top_logprobs).
inline constexpr int32_t kMaxLogprobs = 20;

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  // 1 + the number of tokens strictly more likely (vLLM's rank).
  int32_t rank = 1;
  // The `num_top` most likely tokens, most likely first (lower id first on ties).
  std::vector<TopLogprob> top;
};

// The log-probability of `token` under softmax(logits) and the `num_top` most likely tokens
// (0 = none). Accumulates in double; a -inf logit has logprob -inf.
TokenLogprob ComputeTokenLogprob(std::span<const float> logits, int32_t token, int32_t num_top);

}  // namespace pdspark::sampling
