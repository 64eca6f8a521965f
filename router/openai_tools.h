// The tool-calling fields of a chat request (OpenAI's shapes): `tools`, `tool_choice`, an
// assistant turn's `tool_calls` and a `tool` turn's `tool_call_id`. Tool schemas and call
// arguments keep the key order they were sent in, because the prompt shows them as Python's
// json.dumps writes them (PythonJsonDumps), as the release's encoder does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/openai_protocol.h"

namespace pdspark::router {

// `tools` and `tool_choice` of the chat body `raw` (parsed: `body`).
std::optional<ApiError> ParseTools(std::string_view raw, const nlohmann::json& body,
                                   OpenAiRequest* request);

// An assistant message's `tool_calls`, a tool message's `tool_call_id`.
std::optional<ApiError> ParseMessageToolFields(const nlohmann::json& message,
                                               const std::string& param, ChatMessage* out);

// The tool calls a forced tool choice's output stands for: the named function called with the
// output as its arguments, or the {name, parameters} list `required` asks for. Nullopt when the
// output is not such JSON (max_tokens cut it): it stays content, as vLLM leaves it.
std::optional<std::vector<ToolCallDelta>> ForcedToolCalls(ToolChoice choice,
                                                          const std::string& function,
                                                          std::string_view output);

// json.dumps(value, ensure_ascii=False): ", " and ": " separators, keys in their order.
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

}  // namespace pdspark::router
