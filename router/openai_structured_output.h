// Structured output in OpenAI's and vLLM's shapes: `response_format` (json_object, json_schema),
// vLLM's `guided_json` and `guided_choice`, and its newer `structured_outputs` {json, choice}.
// The router compiles what it gets (common/structured) so that a schema the engine cannot hold
// a completion to is a 400 naming the keyword, before any worker is asked.
#pragma once

#include <optional>

#include "nlohmann/json.hpp"
#include "router/openai_protocol.h"

namespace pdspark::router {

std::optional<ApiError> ParseStructuredOutput(const nlohmann::json& body, StructuredOutput* out);

// The same check for a constraint that came another way (the gRPC SamplingParams).
std::optional<ApiError> CheckStructuredOutput(const StructuredOutput& constraint,
                                              const std::string& param);

}  // namespace pdspark::router
