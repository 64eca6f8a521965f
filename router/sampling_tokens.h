// The sampling options that name tokens, made ready for the engine with the router's tokenizer:
// vLLM's bad_words become token sequences (each word as written and with a leading space, so it
// is banned at the start of the text and inside it, as vLLM does), and logit_bias and bad_words
// ids are checked against the vocabulary, so a wrong id is a 400 naming the field.
#pragma once

#include <optional>

#include "router/openai_protocol.h"
#include "router/text_codec.h"

namespace pdspark::router {

// `param_prefix` goes before the field in an error's param ("sampling." for gRPC).
std::optional<ApiError> ResolveSamplingTokens(const TextCodec& codec, SamplingOptions* sampling,
                                              const std::string& param_prefix = "");

}  // namespace pdspark::router
