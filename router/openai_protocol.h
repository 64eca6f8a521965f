// The OpenAI-compatible HTTP surface: parsing and validating `POST /v1/completions` and
// `POST /v1/chat/completions` bodies into one internal request, and formatting responses,
// SSE chunks and error bodies the way OpenAI (and vLLM, whose extras we accept) do.
//
// Unknown fields are accepted and ignored, as vLLM does, so clients that send newer fields keep
// working; fields we know but cannot honour (n > 1, tools, ...) are rejected with a
// 400 naming the parameter, because silently ignoring them would return wrong results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// A 400 invalid_request_error about `param`.
ApiError BadRequest(std::string message, std::string param, std::string code = "invalid_value");

// What the completion must match, at most one of them (v1.SamplingParams json_schema,
// json_object, choice, regex).
struct StructuredOutput {
  std::string json_schema;
  bool json_object = false;
  std::vector<std::string> choice;
  std::string regex;
  bool empty() const {
    return json_schema.empty() && !json_object && choice.empty() && regex.empty();
  }
};

// A function call an assistant turn made (OpenAI `tool_calls[i]`).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ChatMessage {
  std::string role;  // system | user | assistant | developer | tool
  std::string content;
  std::string reasoning_content;     // assistant turns in thinking mode
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool: the call it answers
};

// `tool_choice`: `auto` parses the model's calls into `tool_calls`, `none` leaves its text
// alone. `required` and a named function hold the output to a JSON schema, as vLLM does: a list
// of {name, parameters} of the tools, or the named function's parameters, turned into
// `tool_calls` (router/openai_tools.h).
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

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
  // Log-probabilities the engine computes (v1.SamplingParams): of every generated token with
  // this many alternatives (completions `logprobs`, chat `top_logprobs`), and of the prompt's
  // tokens (vLLM's `prompt_logprobs`, and an echoed prompt's logprobs).
  std::optional<uint32_t> logprobs;
  std::optional<uint32_t> prompt_logprobs;
  // Logit adjustments (vLLM's meaning; the engine applies them, DSpark included).
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::vector<std::pair<uint32_t, double>> logit_bias;  // token id -> bias
  std::vector<std::string> bad_words;  // HTTP: words the front end tokenizes into bad_words_ids
  std::vector<std::vector<uint32_t>> bad_words_ids;
  // Structured output (router/openai_structured_output.h).
  StructuredOutput structured;
};

// The most alternatives `logprobs`, `top_logprobs` and `prompt_logprobs` may ask for (vLLM's
// default --max-logprobs).
inline constexpr uint32_t kMaxLogprobs = 20;

// A completions prompt: text (BOS prepended, special-token strings parsed, as vLLM), or ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<uint32_t> token_ids;  // when `text` is unset
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  // Completions: one prompt, or a batch answered with n choices per prompt in prompt order.
  std::vector<CompletionPrompt> prompts;
  // Chat.
  std::vector<ChatMessage> messages;
  // Chat `tools`: each one's `function` object as the prompt shows it (Python's json.dumps of it,
  // keys in the order sent, as the release's encoder writes it).
  std::vector<std::string> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_function;  // kNamed: the function
  std::string tool_choice_schema;    // kRequired, kNamed: what the output is held to
  bool thinking = false;             // chat_template_kwargs.thinking / enable_thinking
  bool add_generation_prompt = true;
  SamplingOptions sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string request_id;      // vLLM extra; empty -> generated
  // Choices per prompt, and the samples drawn per prompt to pick them from: the n with the
  // highest cumulative logprob (best_of > n, not streamed). Sample i of a seeded request uses
  // seed + i (vLLM's parallel sampling).
  uint32_t n = 1;
  uint32_t best_of = 1;
  bool echo = false;  // completions: the prompt's text (and logprobs) come first
  // vLLM extra, not streamed: the prompt's logprobs with this many alternatives.
  std::optional<uint32_t> prompt_logprobs;
};

struct ParseLimits {
  size_t max_body_bytes = 8u << 20;
  // JSON nesting beyond this is refused before parsing, so a hostile body cannot exhaust the
  // stack of the recursive parser.
  int max_json_depth = 64;
  // Each stop string is matched against every text delta: bound the work one request can ask.
  size_t max_stop_strings = 32;
  // The same bound for bad_words, and one for logit_bias entries (each costs every sampled row).
  size_t max_bad_words = 32;
  size_t max_logit_bias = 1024;
  // Samples one request may ask for: prompts x best_of (each one a request to the workers).
  size_t max_samples = 128;
};

using ParseResult = std::variant<OpenAiRequest, ApiError>;

// Returns the ApiError `expr` gives, if any, from the calling function.
#define RETURN_IF_API_ERROR(expr)                   \
  do {                                              \
    std::optional<ApiError> api_error_ = (expr);    \
    if (api_error_.has_value()) return *api_error_; \
  } while (0)

// Parses and validates a request body for `kind`.
ParseResult ParseOpenAiRequest(std::string_view body, ApiKind kind, const ParseLimits& limits);

// The limits on sampling options that every front end (HTTP, gRPC) applies.
std::optional<ApiError> CheckSamplingLimits(const SamplingOptions& sampling,
                                            const ParseLimits& limits);

// `{"error":{"message","type","param","code"}}`.
std::string FormatErrorBody(const ApiError& error);

enum class ApiFinishReason { kNone, kStop, kLength, kAbort, kError, kToolCalls };
// "stop" / "length" / "abort" / "error" / "tool_calls"; kNone -> JSON null.
std::string_view FinishReasonName(ApiFinishReason reason);

struct UsageCounts {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;  // of prompt_tokens, reused from a worker's prefix cache
};

// Identity fields shared by every response and chunk of one request.
struct ResponseHeader {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// One position's log-probability as the API shows it: the token's own text (U+FFFD for a
// partial character, as vLLM), and the most likely tokens there.
struct ApiTopLogprob {
  uint32_t token_id = 0;
  std::string token;
  float logprob = 0;
};
struct ApiTokenLogprob {
  uint32_t token_id = 0;
  std::string token;
  std::optional<float> logprob;  // none: an echoed prompt's first token
  uint32_t rank = 1;
  std::vector<ApiTopLogprob> top;
};
// A choice's (or a streamed delta's) logprobs; completions' text offsets count characters (code
// points, as Python's len() in vLLM) from `text_offset`, the choice's characters before them.
struct ApiLogprobs {
  std::vector<ApiTokenLogprob> tokens;
  size_t text_offset = 0;
};

// A tool call the model made, or a piece of one as a stream sends it: the first piece carries
// the id and the name, each one a piece of the arguments (a JSON object, as text).
struct ToolCallDelta {
  int index = 0;  // of the call in its choice
  std::string id;
  std::string name;
  std::string arguments;
};

// One choice of a non-streaming response.
struct ApiChoice {
  uint32_t index = 0;
  std::string text;
  std::optional<std::string> reasoning;   // chat with a reasoning parser: reasoning_content
  std::vector<ToolCallDelta> tool_calls;  // chat with a tool-call parser: whole calls
  ApiFinishReason finish = ApiFinishReason::kNone;
  std::optional<ApiLogprobs> logprobs;  // none: "logprobs": null
  // vLLM's prompt_logprobs (prompt tokens 1..n-1): in the choice for completions, beside the
  // choices for chat (the first choice's); none: not shown.
  std::optional<std::vector<ApiTokenLogprob>> prompt_logprobs;
};

// The non-streaming response body.
std::string FormatResponse(ApiKind kind, const ResponseHeader& header,
                           const std::vector<ApiChoice>& choices, const UsageCounts& usage);
// One choice with text and finish reason only.
std::string FormatResponse(ApiKind kind, const ResponseHeader& header, std::string_view text,
                           ApiFinishReason finish, const UsageCounts& usage);

// What one SSE event says of one choice.
struct StreamDelta {
  uint32_t index = 0;
  std::string_view text;
  std::string_view reasoning;  // chat with a reasoning parser: delta.reasoning_content
  const std::vector<ToolCallDelta>* tool_calls = nullptr;  // chat: delta.tool_calls
  const ApiLogprobs* logprobs = nullptr;
  // Chat: a choice's first event carries `"role":"assistant"`, as OpenAI's does.
  bool first = false;
  ApiFinishReason finish = ApiFinishReason::kNone;  // set on a choice's last event
};
// One SSE event `data: {...}\n\n`.
std::string FormatStreamChunk(ApiKind kind, const ResponseHeader& header, const StreamDelta& delta);
// Choice 0's text delta.
std::string FormatStreamChunk(ApiKind kind, const ResponseHeader& header, std::string_view text,
                              ApiFinishReason finish, bool first);

// The `stream_options.include_usage` event: empty `choices` and the usage.
std::string FormatUsageChunk(ApiKind kind, const ResponseHeader& header, const UsageCounts& usage);

// An error in the middle of a stream, after the 200 headers went out.
std::string FormatStreamError(const ApiError& error);

// Characters (code points) of UTF-8 `text`: the unit of completions' text_offset.
size_t CharacterCount(std::string_view text);

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace pdspark::router
