#include "router/sampling_tokens.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pdspark::router {
namespace {

ApiError OutOfVocabulary(const std::string& param, uint32_t id, uint32_t vocab) {
  return ApiError{400, absl::StrCat("token id ", id, " outside the vocabulary [0, ", vocab, ")"),
                  "invalid_request_error", param, "invalid_value"};
}

}  // namespace

std::optional<ApiError> ResolveSamplingTokens(const TextCodec& codec, SamplingOptions* sampling,
                                              const std::string& param_prefix) {
  const uint32_t vocab = codec.vocab_size();
  for (const auto& [id, bias] : sampling->logit_bias) {
    if (id >= vocab) return OutOfVocabulary(param_prefix + "logit_bias", id, vocab);
  }
  for (const std::string& word : sampling->bad_words) {
    const std::string bare(absl::StripLeadingAsciiWhitespace(word));
    for (const std::string& text : {bare, " " + bare}) {
      StatusOr<std::vector<uint32_t>> ids = codec.Encode(text, /*parse_special=*/false);
      if (!ids.ok() || ids->empty()) continue;
      auto& known = sampling->bad_words_ids;
      if (std::find(known.begin(), known.end(), *ids) == known.end()) known.push_back(*ids);
    }
  }
  for (const auto& word : sampling->bad_words_ids) {
    if (word.empty()) {
      return ApiError{400, "a bad_words token sequence is empty", "invalid_request_error",
                      param_prefix + "bad_words", "invalid_value"};
    }
    for (uint32_t id : word) {
      if (id >= vocab) return OutOfVocabulary(param_prefix + "bad_words", id, vocab);
    }
  }
  return std::nullopt;
}

}  // namespace pdspark::router
