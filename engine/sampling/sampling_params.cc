#include "engine/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/sampling/logprobs.h"

namespace pdspark::sampling {

// Comparisons are written so that NaN fails them: `!(x >= 0)` is true for NaN.
Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be >= 0 and finite, got ", temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be -1 or 0 (disabled) or >= 1, got ", top_k));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 1, got ", max_tokens));
  }
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_tokens must be in [0, max_tokens = ", max_tokens, "], got ", min_tokens));
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, ", kMaxLogprobs, "], got ", logprobs));
  }
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_logprobs must be in [0, ", kMaxLogprobs, "], got ", prompt_logprobs));
  }
  for (auto [name, value] : {std::pair{"presence_penalty", presence_penalty},
                             std::pair{"frequency_penalty", frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [-2, 2], got ", value));
    }
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be > 0 and finite, got ", repetition_penalty));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("logit_bias token ", id, " < 0"));
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias of token ", id, " must be in [-100, 100], got ", bias));
    }
  }
  for (const std::vector<int32_t>& word : bad_words) {
    if (word.empty()) return absl::InvalidArgumentError("bad_words has an empty token sequence");
    for (int32_t id : word) {
      if (id < 0) return absl::InvalidArgumentError(absl::StrCat("bad_words token ", id, " < 0"));
    }
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("stop_token_ids must be >= 0, got ", id));
    }
  }
  return absl::OkStatus();
}

Status SamplingParams::CheckTokenIds(int64_t vocab_size) const {
  auto check = [&](int32_t id, const char* field) -> Status {
    if (id < vocab_size) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(field, " token ", id, " outside the vocabulary [0, ", vocab_size, ")"));
  };
  for (const auto& [id, bias] : logit_bias) RETURN_IF_ERROR(check(id, "logit_bias"));
  for (const auto& word : bad_words) {
    for (int32_t id : word) RETURN_IF_ERROR(check(id, "bad_words"));
  }
  return absl::OkStatus();
}

}  // namespace pdspark::sampling
