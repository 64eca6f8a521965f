// libFuzzer target: arbitrary bytes as an OpenAI request body (the first byte picks completions
// or chat), through the router's whole request mapping: parsing and validation, the sampling
// limits, the DeepSeek-V4 chat template, and the response / error formatting. Properties
// checked besides "no crash": every error is a 4xx with a message and a JSON body that parses
// back to it; every response and stream chunk is JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "nlohmann/json.hpp"
#include "router/chat_template.h"
#include "router/openai_protocol.h"

namespace {

using namespace pdspark::router;

void Require(bool ok) {
  if (!ok) std::abort();  // a property failed: libFuzzer saves the input as a crash
}

bool IsUtf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();  // the strict serializer throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

void CheckError(const ApiError& error) {
  Require(error.http_status >= 400 && error.http_status < 500);
  Require(!error.message.empty());
  // The body is JSON even when the message quotes the client's invalid UTF-8 (replaced by
  // U+FFFD there), and carries the message unchanged otherwise.
  const nlohmann::json body = nlohmann::json::parse(FormatErrorBody(error));
  const std::string sent = body["error"]["message"].get<std::string>();
  Require(!sent.empty());
  if (IsUtf8(error.message)) Require(sent == error.message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ApiKind kind = data[0] & 1 ? ApiKind::kChat : ApiKind::kCompletion;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  ParseLimits limits;
  limits.max_body_bytes = 1 << 16;
  ParseResult parsed = ParseOpenAiRequest(body, kind, limits);
  if (const auto* error = std::get_if<ApiError>(&parsed)) {
    CheckError(*error);
    return 0;
  }
  const OpenAiRequest& request = std::get<OpenAiRequest>(parsed);
  Require(request.kind == kind);
  Require(request.sampling.stop.size() <= limits.max_stop_strings);
  std::string text = request.prompts.empty() ? "" : request.prompts[0].text.value_or("");
  if (kind == ApiKind::kChat) {
    ChatTemplateOptions options;
    options.thinking = request.thinking;
    options.add_generation_prompt = request.add_generation_prompt;
    auto rendered = EncodeDeepSeekV4Chat(request.messages, options);
    if (!rendered.ok()) return 0;
    text = *rendered;
  }
  // The prompt text stands in for generated text: any bytes must format as JSON.
  const ResponseHeader header{"cmpl-fuzz", 1700000000, request.model};
  UsageCounts usage{1, 2};
  (void)nlohmann::json::parse(FormatResponse(kind, header, text, ApiFinishReason::kStop, usage));
  const std::string chunk = FormatStreamChunk(kind, header, text, ApiFinishReason::kNone, true);
  Require(chunk.rfind("data: ", 0) == 0);
  (void)nlohmann::json::parse(std::string_view(chunk).substr(6));
  return 0;
}
