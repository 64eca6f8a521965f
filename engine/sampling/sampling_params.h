// Per-request sampling parameters with the OpenAI / vLLM field names and defaults.
// The HTTP layer fills this struct from the request body; Validate() is the single place that
// decides whether a combination is acceptable, so every entry point rejects the same inputs
// with the same message.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/structured/grammar.h"

namespace pdspark::sampling {

// Temperatures below this are treated as greedy decoding (vLLM's _SAMPLING_EPS), because
// dividing logits by such a value overflows and the result is argmax anyway.
inline constexpr float kGreedyTemperatureEpsilon = 1e-5f;

struct SamplingParams {
  float temperature = 1.0f;      // 0 (or < kGreedyTemperatureEpsilon) means greedy.
  float top_p = 1.0f;            // Nucleus mass in (0, 1]; 1 disables.
  int32_t top_k = -1;            // -1 or 0 disables; otherwise keep the k most likely tokens.
  float min_p = 0.0f;            // In [0, 1]; keep tokens with p >= min_p * max p. 0 disables.
  std::optional<uint64_t> seed;  // Per-request RNG seed; absent means a random seed.
  int32_t max_tokens = 16;       // Maximum number of generated tokens (vLLM default).
  int32_t min_tokens = 0;        // EOS and stop tokens are suppressed until this many exist.
  std::vector<int32_t> stop_token_ids;  // Generation ends after emitting any of these.
  bool ignore_eos = false;              // When true, EOS does not end generation.
  // Log-probabilities to report (engine/sampling/logprobs.h): -1 none; n >= 0 the sampled
  // token's and the n most likely tokens', at every generated position (`logprobs`) or every
  // prompt position after the first (`prompt_logprobs`). At most kMaxLogprobs.
  int32_t logprobs = -1;
  int32_t prompt_logprobs = -1;
  // Logit adjustments (engine/sampling/penalties.h), with vLLM's meaning and defaults.
  float presence_penalty = 0.0f;                      // In [-2, 2].
  float frequency_penalty = 0.0f;                     // In [-2, 2].
  float repetition_penalty = 1.0f;                    // > 0; 1 disables.
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias in [-100, 100])
  std::vector<std::vector<int32_t>> bad_words;        // token sequences never to complete
  // Structured output: the completion matches this grammar (a JSON schema, any JSON object, a
  // choice), its tokens masked by the engine's TokenVocabulary. Unset: unconstrained.
  std::shared_ptr<const structured::Grammar> grammar;

  bool greedy() const { return temperature < kGreedyTemperatureEpsilon; }
  bool top_k_enabled() const { return top_k > 0; }
  bool top_p_enabled() const { return top_p < 1.0f; }
  bool min_p_enabled() const { return min_p > 0.0f; }

  // Returns InvalidArgument naming the first offending field, e.g. "top_p must be in (0, 1]".
  Status Validate() const;
  // InvalidArgument when logit_bias or bad_words names a token at or above `vocab_size`.
  Status CheckTokenIds(int64_t vocab_size) const;
};

}  // namespace pdspark::sampling
