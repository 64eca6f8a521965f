// The response half of router/openai_protocol.h: bodies, SSE events and error bodies in
// OpenAI's (and vLLM's) shapes.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/openai_logprobs.h"
#include "router/openai_protocol.h"

namespace pdspark::router {
namespace {

using nlohmann::json;

// OpenAI's tool_calls: a piece without an id (a later argument delta) carries only its index
// and arguments.
json ToolCallsJson(const std::vector<ToolCallDelta>& calls) {
  json out = json::array();
  for (const ToolCallDelta& c : calls) {
    json call = {{"index", c.index}};
    json function = {{"arguments", c.arguments}};
    if (!c.id.empty()) {
      call["id"] = c.id;
      call["type"] = "function";
      function["name"] = c.name;
    }
    call["function"] = std::move(function);
    out.push_back(std::move(call));
  }
  return out;
}

json NullableString(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json FinishJson(ApiFinishReason finish) {
  return finish == ApiFinishReason::kNone ? json(nullptr) : json(FinishReasonName(finish));
}

json UsageJson(const UsageCounts& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json HeaderJson(const ResponseHeader& header, std::string_view object) {
  return {
      {"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

// Replaces invalid UTF-8 rather than throwing: text deltas should never be broken, but a
// formatting failure must not take the server down.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Sse(const json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

}  // namespace

std::string FormatErrorBody(const ApiError& error) {
  json body = {{"error",
                {{"message", error.message},
                 {"type", error.type},
                 {"param", NullableString(error.param)},
                 {"code", NullableString(error.code)}}}};
  return Dump(body);
}

std::string_view FinishReasonName(ApiFinishReason reason) {
  switch (reason) {
    case ApiFinishReason::kStop:
      return "stop";
    case ApiFinishReason::kLength:
      return "length";
    case ApiFinishReason::kAbort:
      return "abort";
    case ApiFinishReason::kError:
      return "error";
    case ApiFinishReason::kToolCalls:
      return "tool_calls";
    case ApiFinishReason::kNone:
      break;
  }
  return "";
}

std::string FormatResponse(ApiKind kind, const ResponseHeader& header,
                           const std::vector<ApiChoice>& choices, const UsageCounts& usage) {
  json body =
      HeaderJson(header, kind == ApiKind::kCompletion ? "text_completion" : "chat.completion");
  body["choices"] = json::array();
  for (const ApiChoice& c : choices) {
    json choice = {{"index", c.index},
                   {"logprobs", c.logprobs ? LogprobsJson(kind, *c.logprobs) : json(nullptr)},
                   {"finish_reason", FinishJson(c.finish)}};
    if (kind == ApiKind::kCompletion) {
      choice["text"] = c.text;
      if (c.prompt_logprobs) choice["prompt_logprobs"] = PromptLogprobsJson(*c.prompt_logprobs);
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (c.reasoning) choice["message"]["reasoning_content"] = *c.reasoning;
      if (!c.tool_calls.empty()) {
        // OpenAI: a turn that only calls tools has null content.
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = ToolCallsJson(c.tool_calls);
      }
    }
    body["choices"].push_back(std::move(choice));
  }
  // vLLM shows chat's prompt_logprobs beside the choices: they share the one prompt.
  if (kind == ApiKind::kChat && !choices.empty() && choices.front().prompt_logprobs) {
    body["prompt_logprobs"] = PromptLogprobsJson(*choices.front().prompt_logprobs);
  }
  body["usage"] = UsageJson(usage);
  return Dump(body);
}

std::string FormatResponse(ApiKind kind, const ResponseHeader& header, std::string_view text,
                           ApiFinishReason finish, const UsageCounts& usage) {
  ApiChoice choice;
  choice.text = text;
  choice.finish = finish;
  return FormatResponse(kind, header, std::vector<ApiChoice>{choice}, usage);
}

std::string FormatStreamChunk(ApiKind kind, const ResponseHeader& header,
                              const StreamDelta& delta) {
  json choice = {{"index", delta.index},
                 {"logprobs", delta.logprobs ? LogprobsJson(kind, *delta.logprobs) : json(nullptr)},
                 {"finish_reason", FinishJson(delta.finish)}};
  json body;
  if (kind == ApiKind::kCompletion) {
    body = HeaderJson(header, "text_completion");
    choice["text"] = delta.text;
  } else {
    body = HeaderJson(header, "chat.completion.chunk");
    json d = json::object();
    if (delta.first) d["role"] = "assistant";
    if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
    if (delta.tool_calls != nullptr && !delta.tool_calls->empty()) {
      d["tool_calls"] = ToolCallsJson(*delta.tool_calls);
    }
    if (!delta.text.empty() || (delta.first && delta.reasoning.empty())) d["content"] = delta.text;
    choice["delta"] = d;
  }
  body["choices"] = json::array({choice});
  return Sse(body);
}

std::string FormatStreamChunk(ApiKind kind, const ResponseHeader& header, std::string_view text,
                              ApiFinishReason finish, bool first) {
  return FormatStreamChunk(kind, header,
                           StreamDelta{.text = text, .first = first, .finish = finish});
}

std::string FormatUsageChunk(ApiKind kind, const ResponseHeader& header, const UsageCounts& usage) {
  json body = HeaderJson(
      header, kind == ApiKind::kCompletion ? "text_completion" : "chat.completion.chunk");
  body["choices"] = json::array();
  body["usage"] = UsageJson(usage);
  return Sse(body);
}

std::string FormatStreamError(const ApiError& error) {
  return absl::StrCat("data: ", FormatErrorBody(error), "\n\n");
}

}  // namespace pdspark::router
