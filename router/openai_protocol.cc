#include "router/openai_protocol.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/openai_structured_output.h"
#include "router/openai_tools.h"

namespace pdspark::router {
ApiError BadRequest(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

namespace {

using nlohmann::json;

ApiError WrongType(const std::string& param, const char* expected) {
  return BadRequest(absl::StrCat("'", param, "' must be ", expected), param, "invalid_type");
}

// Depth of [] / {} nesting outside string literals; cheap pre-check before the recursive parse.
int MaxJsonDepth(std::string_view body) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

// Typed reads of optional top-level fields. JSON null counts as absent, as in the OpenAI API.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : object_(object) {}

  const json* Find(const std::string& name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<ApiError> Bool(const std::string& name, bool* out) const {
    const json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) return WrongType(name, "a boolean");
    *out = v->get<bool>();
    return std::nullopt;
  }

  std::optional<ApiError> Number(const std::string& name, double lo, double hi, double* out) const {
    const json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return WrongType(name, "a number");
    double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
      return BadRequest(absl::StrCat("'", name, "' must be in [", lo, ", ", hi, "], got ", d),
                        name);
    }
    *out = d;
    return std::nullopt;
  }

  // Integers; an integral float such as 16.0 is accepted, as pydantic does for vLLM.
  std::optional<ApiError> Int(const std::string& name, int64_t lo, int64_t hi,
                              std::optional<int64_t>* out) const {
    const json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    int64_t value = 0;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return BadRequest(absl::StrCat("'", name, "' is out of range"), name);
      }
      value = v->get<int64_t>();
    } else if (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      value = static_cast<int64_t>(v->get<double>());
    } else {
      return WrongType(name, "an integer");
    }
    if (value < lo || value > hi) {
      return BadRequest(absl::StrCat("'", name, "' must be in [", lo, ", ", hi, "], got ", value),
                        name);
    }
    *out = value;
    return std::nullopt;
  }

  std::optional<ApiError> String(const std::string& name, std::string* out) const {
    const json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return WrongType(name, "a string");
    *out = v->get<std::string>();
    return std::nullopt;
  }

 private:
  const json& object_;
};

constexpr uint32_t kMaxTokenId = std::numeric_limits<int32_t>::max();

std::optional<ApiError> ParseTokenIds(const json& array, const std::string& param,
                                      std::vector<uint32_t>* out) {
  out->clear();
  for (const json& id : array) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
      return BadRequest(absl::StrCat("'", param, "' must hold non-negative integer token ids"),
                        param, "invalid_type");
    }
    out->push_back(static_cast<uint32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

// One prompt of a batch: a string or a list of token ids.
std::optional<ApiError> ParseOnePrompt(const json& prompt, CompletionPrompt* out) {
  if (prompt.is_string()) {
    out->text = prompt.get<std::string>();
    if (out->text->empty()) return BadRequest("'prompt' must not be empty", "prompt");
    return std::nullopt;
  }
  if (!prompt.is_array()) {
    return WrongType("prompt", "a string, a list of token ids, or a list of those");
  }
  RETURN_IF_API_ERROR(ParseTokenIds(prompt, "prompt", &out->token_ids));
  if (out->token_ids.empty()) return BadRequest("'prompt' must not be empty", "prompt");
  return std::nullopt;
}

// `prompt`: a string, a list of token ids, or a batch (a list of either).
std::optional<ApiError> ParsePrompt(const FieldReader& fields, OpenAiRequest* request) {
  const json* prompt = fields.Find("prompt");
  if (prompt == nullptr) {
    return BadRequest("'prompt' is required", "prompt", "missing_required_parameter");
  }
  const bool batch = prompt->is_array() && !prompt->empty() &&
                     (prompt->front().is_string() || prompt->front().is_array());
  if (!batch) {
    if (prompt->is_array() && prompt->empty()) {
      return BadRequest("'prompt' must not be empty", "prompt");
    }
    return ParseOnePrompt(*prompt, &request->prompts.emplace_back());
  }
  for (const json& one : *prompt) {
    RETURN_IF_API_ERROR(ParseOnePrompt(one, &request->prompts.emplace_back()));
  }
  return std::nullopt;
}

// Chat content: a string, or a list of {"type":"text","text":...} parts (joined by "\n", as
// vLLM does for text-only content).
std::optional<ApiError> ParseContent(const json& content, const std::string& param,
                                     std::string* out) {
  if (content.is_null()) return std::nullopt;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(param, "a string or a list of content parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string part_param = absl::StrCat(param, "[", i, "]");
    if (!part.is_object()) return WrongType(part_param, "an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return BadRequest(absl::StrCat("'", part_param, ".type' is required"), part_param,
                        "missing_required_parameter");
    }
    if (*type != "text") {
      return BadRequest(absl::StrCat("content part type '", type->get<std::string>(),
                                     "' is not supported; only 'text' is"),
                        part_param + ".type", "unsupported_value");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return WrongType(part_param + ".text", "a string");
    if (i > 0) out->push_back('\n');
    out->append(text->get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const FieldReader& fields, OpenAiRequest* request) {
  const json* messages = fields.Find("messages");
  if (messages == nullptr) {
    return BadRequest("'messages' is required", "messages", "missing_required_parameter");
  }
  if (!messages->is_array()) return WrongType("messages", "a list of messages");
  if (messages->empty()) return BadRequest("'messages' must not be empty", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(param, "an object");
    ChatMessage message;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return BadRequest(absl::StrCat("'", param, ".role' is required"), param + ".role",
                        "missing_required_parameter");
    }
    message.role = role->get<std::string>();
    if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
        message.role != "developer" && message.role != "tool") {
      return BadRequest(absl::StrCat("role '", message.role,
                                     "' is not supported; use system, developer, user, "
                                     "assistant or tool"),
                        param + ".role", "unsupported_value");
    }
    RETURN_IF_API_ERROR(ParseMessageToolFields(m, param, &message));
    if (auto c = m.find("content"); c != m.end()) {
      RETURN_IF_API_ERROR(ParseContent(*c, param + ".content", &message.content));
    }
    if (auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
      if (!r->is_string()) return WrongType(param + ".reasoning_content", "a string");
      message.reasoning_content = r->get<std::string>();
    }
    request->messages.push_back(std::move(message));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const FieldReader& fields, SamplingOptions* sampling) {
  const json* stop = fields.Find("stop");
  if (stop == nullptr) return std::nullopt;
  if (stop->is_string()) {
    if (!stop->get<std::string>().empty()) sampling->stop.push_back(stop->get<std::string>());
    return std::nullopt;
  }
  if (!stop->is_array()) return WrongType("stop", "a string or a list of strings");
  for (const json& s : *stop) {
    if (!s.is_string()) return WrongType("stop", "a string or a list of strings");
    if (!s.get<std::string>().empty()) sampling->stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// Fields that change the result and that we cannot honour: refuse rather than ignore.
std::optional<ApiError> RejectUnsupported(const FieldReader& fields, ApiKind kind) {
  if (const json* v = fields.Find("echo");
      kind == ApiKind::kChat && v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return BadRequest("echo is not supported for chat completions", "echo",
                      "unsupported_parameter");
  }
  // Each: a field and the values that ask for nothing (null is always harmless). docs/api.md
  // lists why each one is refused.
  struct Refused {
    const char* name;
    bool (*harmless)(const json&);
  };
  static constexpr Refused kRefused[] = {
      {"suffix", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); }},
      {"tools", [](const json& v) { return v.is_array() && v.empty(); }},
      {"tool_choice",
       [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; }},
      {"guided_grammar", [](const json&) { return false; }},
      {"use_beam_search", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"allowed_token_ids", [](const json&) { return false; }},
      {"truncate_prompt_tokens", [](const json&) { return false; }},
      {"continue_final_message", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"return_tokens_as_token_ids",
       [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"logits_processors", [](const json& v) { return v.is_array() && v.empty(); }},
      {"prompt_embeds", [](const json&) { return false; }},
      {"chat_template", [](const json&) { return false; }},
      {"documents", [](const json& v) { return v.is_array() && v.empty(); }},
  };
  for (const Refused& r : kRefused) {
    // Chat calls tools (ParseTools); a completion cannot.
    const std::string_view name = r.name;
    if (kind == ApiKind::kChat && (name == "tools" || name == "tool_choice")) continue;
    if (const json* v = fields.Find(r.name); v != nullptr && !r.harmless(*v)) {
      return BadRequest(absl::StrCat("'", r.name, "' is not supported by this server"), r.name,
                        "unsupported_parameter");
    }
  }
  return std::nullopt;
}

// Completions: `logprobs` is how many alternatives (an integer), `echo` puts the prompt first.
// Chat: `logprobs` is a boolean and `top_logprobs` the count. Both: vLLM's `prompt_logprobs`,
// which it does not stream.
std::optional<ApiError> ParseLogprobs(const FieldReader& fields, ApiKind kind,
                                      OpenAiRequest* request) {
  SamplingOptions& s = request->sampling;
  std::optional<int64_t> count;
  if (kind == ApiKind::kCompletion) {
    const json* v = fields.Find("logprobs");
    if (v != nullptr && v->is_boolean()) {
      if (v->get<bool>()) return WrongType("logprobs", "an integer");
    } else {
      RETURN_IF_API_ERROR(fields.Int("logprobs", 0, kMaxLogprobs, &count));
    }
    RETURN_IF_API_ERROR(fields.Bool("echo", &request->echo));
  } else {
    bool wanted = false;
    RETURN_IF_API_ERROR(fields.Bool("logprobs", &wanted));
    RETURN_IF_API_ERROR(fields.Int("top_logprobs", 0, kMaxLogprobs, &count));
    if (count && *count > 0 && !wanted) {
      return BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    }
    if (wanted)
      count = count.value_or(0);
    else
      count.reset();
  }
  if (count) s.logprobs = static_cast<uint32_t>(*count);
  std::optional<int64_t> prompt;
  RETURN_IF_API_ERROR(fields.Int("prompt_logprobs", 0, kMaxLogprobs, &prompt));
  if (prompt && request->stream) {
    return BadRequest("'prompt_logprobs' is not available when 'stream' is true",
                      "prompt_logprobs");
  }
  if (prompt) request->prompt_logprobs = static_cast<uint32_t>(*prompt);
  // The engine computes the prompt's logprobs for these and for an echoed prompt's.
  std::optional<uint32_t> wire = request->prompt_logprobs;
  if (request->echo && s.logprobs) wire = std::max(wire.value_or(0), *s.logprobs);
  s.prompt_logprobs = wire;
  return std::nullopt;
}

// presence/frequency/repetition penalties, OpenAI's logit_bias ({"<token id>": bias}) and vLLM's
// bad_words (strings, tokenized by the front end).
std::optional<ApiError> ParseLogitAdjustments(const FieldReader& fields, SamplingOptions* s) {
  RETURN_IF_API_ERROR(fields.Number("presence_penalty", -2.0, 2.0, &s->presence_penalty));
  RETURN_IF_API_ERROR(fields.Number("frequency_penalty", -2.0, 2.0, &s->frequency_penalty));
  RETURN_IF_API_ERROR(fields.Number("repetition_penalty", 0.0, 1e6, &s->repetition_penalty));
  if (s->repetition_penalty <= 0.0) {
    return BadRequest("'repetition_penalty' must be > 0", "repetition_penalty");
  }
  if (const json* bias = fields.Find("logit_bias")) {
    if (!bias->is_object()) return WrongType("logit_bias", "an object of token id: bias");
    for (const auto& [key, value] : bias->items()) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(key, &id)) {
        return BadRequest(absl::StrCat("'logit_bias' key '", key, "' is not a token id"),
                          "logit_bias");
      }
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
        return BadRequest(absl::StrCat("'logit_bias' of token ", key, " must be in [-100, 100]"),
                          "logit_bias");
      }
      s->logit_bias.emplace_back(id, value.get<double>());
    }
  }
  if (const json* words = fields.Find("bad_words")) {
    if (!words->is_array()) return WrongType("bad_words", "a list of strings");
    for (const json& w : *words) {
      if (!w.is_string() || w.get<std::string>().empty()) {
        return WrongType("bad_words", "a list of non-empty strings");
      }
      s->bad_words.push_back(w.get<std::string>());
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseSampling(const FieldReader& fields, ApiKind kind, SamplingOptions* s) {
  RETURN_IF_API_ERROR(fields.Number("temperature", 0.0, 2.0, &s->temperature));
  RETURN_IF_API_ERROR(fields.Number("top_p", 0.0, 1.0, &s->top_p));
  if (s->top_p <= 0.0) return BadRequest("'top_p' must be in (0, 1]", "top_p");
  std::optional<int64_t> top_k;
  RETURN_IF_API_ERROR(fields.Int("top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  if (top_k) s->top_k = static_cast<int32_t>(*top_k);
  RETURN_IF_API_ERROR(fields.Number("min_p", 0.0, 1.0, &s->min_p));

  // Chat prefers max_completion_tokens (the newer OpenAI name); max_tokens is the fallback.
  std::optional<int64_t> max_tokens;
  const char* max_name = "max_tokens";
  if (kind == ApiKind::kChat && fields.Find("max_completion_tokens") != nullptr) {
    max_name = "max_completion_tokens";
  }
  RETURN_IF_API_ERROR(fields.Int(max_name, 1, std::numeric_limits<uint32_t>::max(), &max_tokens));
  if (max_tokens) s->max_tokens = static_cast<uint32_t>(*max_tokens);
  std::optional<int64_t> min_tokens;
  RETURN_IF_API_ERROR(
      fields.Int("min_tokens", 0, std::numeric_limits<uint32_t>::max(), &min_tokens));
  if (min_tokens) s->min_tokens = static_cast<uint32_t>(*min_tokens);
  if (s->max_tokens && s->min_tokens > *s->max_tokens) {
    return BadRequest("'min_tokens' must not exceed 'max_tokens'", "min_tokens");
  }

  std::optional<int64_t> seed;
  RETURN_IF_API_ERROR(fields.Int("seed", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), &seed));
  if (seed) s->seed = static_cast<uint64_t>(*seed);

  RETURN_IF_API_ERROR(ParseStop(fields, s));
  if (const json* ids = fields.Find("stop_token_ids")) {
    if (!ids->is_array()) return WrongType("stop_token_ids", "a list of token ids");
    RETURN_IF_API_ERROR(ParseTokenIds(*ids, "stop_token_ids", &s->stop_token_ids));
  }
  RETURN_IF_API_ERROR(ParseLogitAdjustments(fields, s));
  RETURN_IF_API_ERROR(fields.Bool("ignore_eos", &s->ignore_eos));
  RETURN_IF_API_ERROR(fields.Bool("skip_special_tokens", &s->skip_special_tokens));
  RETURN_IF_API_ERROR(fields.Bool("include_stop_str_in_output", &s->include_stop_str_in_output));
  return std::nullopt;
}

// `n` choices per prompt, picked from `best_of` samples (default n).
std::optional<ApiError> ParseChoices(const FieldReader& fields, OpenAiRequest* request) {
  const int64_t most = static_cast<int64_t>(ParseLimits{}.max_samples);
  std::optional<int64_t> n, best_of;
  RETURN_IF_API_ERROR(fields.Int("n", 1, most, &n));
  RETURN_IF_API_ERROR(fields.Int("best_of", 1, most, &best_of));
  request->n = static_cast<uint32_t>(n.value_or(1));
  request->best_of = static_cast<uint32_t>(best_of.value_or(request->n));
  if (request->best_of < request->n) {
    return BadRequest(
        absl::StrCat("'best_of' (", request->best_of, ") must be >= 'n' (", request->n, ")"),
        "best_of");
  }
  if (request->best_of > request->n && request->stream) {
    return BadRequest("'best_of' > 'n' cannot be streamed: the best are known at the end",
                      "best_of", "unsupported_value");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStreamOptions(const FieldReader& fields, OpenAiRequest* request) {
  RETURN_IF_API_ERROR(fields.Bool("stream", &request->stream));
  const json* options = fields.Find("stream_options");
  if (options == nullptr) return std::nullopt;
  if (!options->is_object()) return WrongType("stream_options", "an object");
  if (!request->stream) {
    return BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options");
  }
  FieldReader option_fields(*options);
  if (auto e = option_fields.Bool("include_usage", &request->include_usage)) {
    e->param = "stream_options.include_usage";
    e->message = "'stream_options.include_usage' must be a boolean";
    return e;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseChatOptions(const FieldReader& fields, OpenAiRequest* request) {
  RETURN_IF_API_ERROR(fields.Bool("add_generation_prompt", &request->add_generation_prompt));
  const json* kwargs = fields.Find("chat_template_kwargs");
  if (kwargs == nullptr) return std::nullopt;
  if (!kwargs->is_object()) return WrongType("chat_template_kwargs", "an object");
  FieldReader kw(*kwargs);
  // vLLM's DeepSeek templates read `thinking`; Qwen-style clients send `enable_thinking`.
  for (const char* name : {"thinking", "enable_thinking"}) {
    if (auto e = kw.Bool(name, &request->thinking)) {
      e->param = absl::StrCat("chat_template_kwargs.", name);
      return e;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseFields(std::string_view raw, const json& body, ApiKind kind,
                                    OpenAiRequest* request) {
  if (!body.is_object()) {
    return BadRequest("the request body must be a JSON object", "", "invalid_type");
  }
  FieldReader fields(body);
  request->kind = kind;
  RETURN_IF_API_ERROR(fields.String("model", &request->model));
  RETURN_IF_API_ERROR(fields.String("request_id", &request->request_id));
  if (kind == ApiKind::kCompletion) {
    RETURN_IF_API_ERROR(ParsePrompt(fields, request));
  } else {
    RETURN_IF_API_ERROR(ParseMessages(fields, request));
    RETURN_IF_API_ERROR(ParseChatOptions(fields, request));
    RETURN_IF_API_ERROR(ParseTools(raw, body, request));
  }
  RETURN_IF_API_ERROR(RejectUnsupported(fields, kind));
  RETURN_IF_API_ERROR(ParseSampling(fields, kind, &request->sampling));
  RETURN_IF_API_ERROR(ParseStructuredOutput(body, &request->sampling.structured));
  if (!request->tool_choice_schema.empty()) {
    // A forced tool choice holds the output to its calls' schema.
    if (!request->sampling.structured.empty()) {
      return BadRequest(
          "'tool_choice' \"required\" or a named function already fixes the output's "
          "format: drop response_format",
          "tool_choice");
    }
    request->sampling.structured.json_schema = request->tool_choice_schema;
    RETURN_IF_API_ERROR(CheckStructuredOutput(request->sampling.structured, "tools"));
  }
  if (request->thinking && !request->sampling.structured.empty()) {
    return BadRequest(
        "structured output is not supported in thinking mode: the grammar would "
        "hold the reasoning to it too",
        "chat_template_kwargs.thinking", "unsupported_parameter");
  }
  RETURN_IF_API_ERROR(ParseStreamOptions(fields, request));
  RETURN_IF_API_ERROR(ParseLogprobs(fields, kind, request));
  RETURN_IF_API_ERROR(ParseChoices(fields, request));
  return std::nullopt;
}

}  // namespace

ParseResult ParseOpenAiRequest(std::string_view body, ApiKind kind, const ParseLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    return ApiError{413,
                    absl::StrCat("request body of ", body.size(), " bytes exceeds the limit of ",
                                 limits.max_body_bytes, " bytes"),
                    "invalid_request_error", "", "request_too_large"};
  }
  if (MaxJsonDepth(body) > limits.max_json_depth) {
    return BadRequest(absl::StrCat("JSON nesting deeper than ", limits.max_json_depth), "",
                      "invalid_json");
  }
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow
    std::string what = e.what();
    if (what.find("UTF-8") != std::string::npos) {
      return BadRequest("the request body is not valid UTF-8", "", "invalid_utf8");
    }
    return BadRequest(absl::StrCat("malformed JSON: ", what), "", "invalid_json");
  }
  OpenAiRequest request;
  if (auto error = ParseFields(body, parsed, kind, &request)) return *error;
  if (auto error = CheckSamplingLimits(request.sampling, limits)) return *error;
  const size_t samples = std::max<size_t>(request.prompts.size(), 1) * request.best_of;
  if (samples > limits.max_samples) {
    return BadRequest(absl::StrCat("prompts x best_of is ", samples, ", more than the ",
                                   limits.max_samples, " samples one request may ask for"),
                      request.best_of > 1 ? "best_of" : "prompt");
  }
  return request;
}

std::optional<ApiError> CheckSamplingLimits(const SamplingOptions& sampling,
                                            const ParseLimits& limits) {
  if (sampling.stop.size() > limits.max_stop_strings) {
    return BadRequest(absl::StrCat("at most ", limits.max_stop_strings, " stop strings, got ",
                                   sampling.stop.size()),
                      "stop");
  }
  if (std::max(sampling.bad_words.size(), sampling.bad_words_ids.size()) > limits.max_bad_words) {
    return BadRequest(absl::StrCat("at most ", limits.max_bad_words, " bad_words"), "bad_words");
  }
  if (sampling.logit_bias.size() > limits.max_logit_bias) {
    return BadRequest(absl::StrCat("at most ", limits.max_logit_bias, " logit_bias entries, got ",
                                   sampling.logit_bias.size()),
                      "logit_bias");
  }
  return std::nullopt;
}

}  // namespace pdspark::router
