#include "engine/sampling/stop_conditions.h"

#include <algorithm>
#include <limits>

namespace pdspark::sampling {
namespace {

bool Contains(std::span<const int32_t> ids, int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

bool IsStopToken(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
                 int32_t token) {
  return Contains(params.stop_token_ids, token) ||
         (!params.ignore_eos && Contains(eos_token_ids, token));
}

}  // namespace

void SuppressStopTokens(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
                        int32_t num_generated, std::span<float> logits) {
  if (num_generated >= params.min_tokens) return;
  const auto suppress = [&](int32_t token) {
    if (token >= 0 && static_cast<size_t>(token) < logits.size()) {
      logits[token] = -std::numeric_limits<float>::infinity();
    }
  };
  for (int32_t token : params.stop_token_ids) suppress(token);
  if (!params.ignore_eos) {
    for (int32_t token : eos_token_ids) suppress(token);
  }
}

FinishReason ApplyStopConditions(const SamplingParams& params,
                                 std::span<const int32_t> eos_token_ids, int32_t num_generated,
                                 std::vector<int32_t>* tokens) {
  const size_t budget = static_cast<size_t>(std::max(0, params.max_tokens - num_generated));
  const size_t limit = std::min(budget, tokens->size());
  // Tokens at index < first_stoppable are still inside min_tokens.
  const size_t first_stoppable =
      static_cast<size_t>(std::max(0, params.min_tokens - num_generated));
  for (size_t i = first_stoppable; i < limit; ++i) {
    if (IsStopToken(params, eos_token_ids, (*tokens)[i])) {
      tokens->resize(i + 1);
      return FinishReason::kStop;
    }
  }
  tokens->resize(limit);
  return limit == budget ? FinishReason::kLength : FinishReason::kNone;
}

FinishReason ApplyStopConditions(const SamplingParams& params,
                                 std::span<const int32_t> eos_token_ids, int32_t num_generated,
                                 AcceptanceResult* result) {
  const FinishReason reason =
      ApplyStopConditions(params, eos_token_ids, num_generated, &result->tokens);
  result->num_accepted =
      std::min(result->num_accepted, static_cast<int32_t>(result->tokens.size()));
  return reason;
}

}  // namespace pdspark::sampling
