// The OpenAI-compatible HTTP surface: parsing and validating `POST /v1/completions` and
// `POST /v1/chat/completions` bodies into one internal request, and formatting responses,
// SSE chunks and error bodies the way OpenAI (and vLLM, whose extras we accept) do.
//
// Unknown fields are accepted and ignored, as vLLM does, so clients that send newer fields keep
// working; fields we know but cannot honour (logprobs, n > 1, tools, ...) are rejected with a
// 400 naming the parameter, because silently ignoring them would return wrong results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace pdspark::router {

enum class ApiKind { kCompletion, kChat };

// An OpenAI-style error. `http_status` 400 for invalid requests, 413 for oversized bodies, 429
// when the router is full, 503 when no worker can serve.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> JSON null
  std::string code;   // empty -> JSON null
};

struct ChatMessage {
  std::string role;  // system | user | assistant | developer
  std::string content;
  std::string reasoning_content;  // assistant turns in thinking mode
};

// Sampling and stopping, with OpenAI / vLLM meaning and defaults.
struct SamplingOptions {
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = -1;  // -1 or 0: off
  double min_p = 0.0;
  // Unset: 16 for completions (OpenAI and vLLM default), the rest of the context for chat.
  std::optional<uint32_t> max_tokens;
  uint32_t min_tokens = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<uint32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  // Completions: exactly one of these.
  std::optional<std::string> prompt_text;
  std::optional<std::vector<uint32_t>> prompt_token_ids;
  // Chat.
  std::vector<ChatMessage> messages;
  bool thinking = false;  // chat_template_kwargs.thinking / enable_thinking
  bool add_generation_prompt = true;
  SamplingOptions sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string request_id;      // vLLM extra; empty -> generated
};

struct ParseLimits {
  size_t max_body_bytes = 8u << 20;
  // JSON nesting beyond this is refused before parsing, so a hostile body cannot exhaust the
  // stack of the recursive parser.
  int max_json_depth = 64;
  // Each stop string is matched against every text delta: bound the work one request can ask.
  size_t max_stop_strings = 32;
};

using ParseResult = std::variant<OpenAiRequest, ApiError>;

// Parses and validates a request body for `kind`.
ParseResult ParseOpenAiRequest(std::string_view body, ApiKind kind, const ParseLimits& limits);

// The limits on sampling options that every front end (HTTP, gRPC) applies.
std::optional<ApiError> CheckSamplingLimits(const SamplingOptions& sampling,
                                            const ParseLimits& limits);

// `{"error":{"message","type","param","code"}}`.
std::string FormatErrorBody(const ApiError& error);

enum class ApiFinishReason { kNone, kStop, kLength, kAbort, kError };
// "stop" / "length" / "abort" / "error"; kNone -> JSON null.
std::string_view FinishReasonName(ApiFinishReason reason);

struct UsageCounts {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
};

// Identity fields shared by every response and chunk of one request.
struct ResponseHeader {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// The non-streaming response body.
std::string FormatResponse(ApiKind kind, const ResponseHeader& header, std::string_view text,
                           ApiFinishReason finish, const UsageCounts& usage);

// One SSE event `data: {...}\n\n` carrying a text delta (and the finish reason on the last one).
// For chat, `first` adds `"role":"assistant"` to the delta as OpenAI does on the first chunk.
std::string FormatStreamChunk(ApiKind kind, const ResponseHeader& header, std::string_view text,
                              ApiFinishReason finish, bool first);

// The `stream_options.include_usage` event: empty `choices` and the usage.
std::string FormatUsageChunk(ApiKind kind, const ResponseHeader& header, const UsageCounts& usage);

// An error in the middle of a stream, after the 200 headers went out.
std::string FormatStreamError(const ApiError& error);

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace pdspark::router
