// The JSON shapes of logprobs in OpenAI (and vLLM) responses:
//   completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
//   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{...}]}]}
//   vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]
#pragma once

#include <vector>

#include "nlohmann/json.hpp"
#include "router/openai_protocol.h"

namespace pdspark::router {

nlohmann::json LogprobsJson(ApiKind kind, const ApiLogprobs& logprobs);
nlohmann::json PromptLogprobsJson(const std::vector<ApiTokenLogprob>& prompt_logprobs);

}  // namespace pdspark::router
