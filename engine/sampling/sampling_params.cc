#include "engine/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

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
  for (int32_t id : stop_token_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("stop_token_ids must be >= 0, got ", id));
    }
  }
  return absl::OkStatus();
}

}  // namespace pdspark::sampling
