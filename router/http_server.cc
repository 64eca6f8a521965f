#include "router/http_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/security/api_key.h"
#include "nlohmann/json.hpp"
#include "router/openai_generation.h"
#include "router/sampling_tokens.h"

namespace pdspark::router {
namespace {

using nlohmann::json;

constexpr char kJson[] = "application/json";

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

HttpResponse Json(std::string body, int status = 200) {
  return HttpResponse{.status = status, .content_type = kJson, .body = std::move(body)};
}

HttpResponse Error(const ApiError& error) {
  HttpResponse response = Json(FormatErrorBody(error), error.http_status);
  // Every 429 (rate limiter, --max-queue) says when to come back, as clients' retry logic
  // (the openai SDKs) reads it.
  if (error.http_status == 429) response.headers.emplace_back("Retry-After", "1");
  return response;
}

}  // namespace

HttpServer::HttpServer(Options options, RequestHandler* handler, WorkerRegistry* registry,
                       RouterMetrics* metrics)
    : options_(std::move(options)),
      handler_(handler),
      registry_(registry),
      metrics_(metrics),
      transport_(options_.transport,
                 [this](const HttpRequest& req, std::shared_ptr<HttpExchange> exchange) {
                   Handle(req, std::move(exchange));
                 }),
      created_(UnixSeconds()) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() { return transport_.Start(); }

void HttpServer::Stop() { transport_.Stop(); }

std::optional<HttpResponse> HttpServer::RefuseBeforeRouting(const HttpRequest& req) {
  if (req.path.rfind("/v1/", 0) != 0) return std::nullopt;  // /health, /metrics: open for probes
  if (!security::AuthorizationMatches(req.Header("Authorization"), options_.api_key)) {
    metrics_->Rejected("unauthenticated");
    HttpResponse response = Error(
        ApiError{401,
                 req.HasHeader("Authorization")
                     ? "Incorrect API key provided."
                     : "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
                 "invalid_request_error", "", "invalid_api_key"});
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    return response;
  }
  if (options_.rate_limiter != nullptr && req.method == "POST") {
    const RateLimiter::Verdict verdict = options_.rate_limiter->Acquire(req.remote_addr);
    if (verdict != RateLimiter::Verdict::kAllowed) {
      metrics_->Rejected("rate_limited");
      return Error(ApiError{429,
                            verdict == RateLimiter::Verdict::kClientLimited
                                ? "Rate limit reached for this client; retry later."
                                : "Rate limit reached for this server; retry later.",
                            "rate_limit_error", "", "rate_limit_exceeded"});
    }
  }
  return std::nullopt;
}

void HttpServer::Handle(const HttpRequest& req, std::shared_ptr<HttpExchange> exchange) {
  if (auto refusal = RefuseBeforeRouting(req)) return exchange->Reply(*std::move(refusal));
  const std::string route = req.method + " " + req.path;
  if (route == "POST /v1/completions") return HandleGenerate(ApiKind::kCompletion, req, exchange);
  if (route == "POST /v1/chat/completions") return HandleGenerate(ApiKind::kChat, req, exchange);
  if (route == "GET /v1/models") return exchange->Reply(HandleModels());
  if (route == "POST /tokenize") return exchange->Reply(HandleTokenize(req));
  if (route == "POST /detokenize") return exchange->Reply(HandleDetokenize(req));
  if (route == "GET /health") return exchange->Reply(HandleHealth());
  if (route == "GET /metrics") return exchange->Reply(HandleMetrics());
  exchange->Reply(Error(ApiError{404, "no such endpoint", "not_found_error", "", ""}));
}

HttpResponse HttpServer::HandleMetrics() {
  try {
    return HttpResponse{.content_type = "text/plain; version=0.0.4",
                        .body = metrics_->Scrape(*registry_)};
  } catch (const std::exception& e) {
    LOG_ERROR("metrics scrape failed: {}", e.what());
    return HttpResponse{.status = 500, .content_type = "text/plain", .body = e.what()};
  }
}

OpenAiGeneration::Parsers HttpServer::Parsers() const {
  return OpenAiGeneration::Parsers{.reasoning = options_.reasoning_parser == "deepseek_v4",
                                   .tool_calls = options_.tool_call_parser == "deepseek_v4"};
}

std::optional<ApiError> HttpServer::CheckModel(const std::string& model) const {
  if (model.empty() || model == options_.model_name || model == options_.model_path) {
    return std::nullopt;
  }
  return ApiError{404, absl::StrCat("The model `", model, "` does not exist."), "not_found_error",
                  "model", "model_not_found"};
}

void HttpServer::HandleGenerate(ApiKind kind, const HttpRequest& req,
                                std::shared_ptr<HttpExchange> exchange) {
  auto refuse = [&](const ApiError& e) {
    metrics_->Rejected("invalid");
    metrics_->RequestFinished("invalid", "");
    exchange->Reply(Error(e));
  };
  ParseLimits limits;
  limits.max_body_bytes = options_.transport.max_body_bytes;
  ParseResult parsed = ParseOpenAiRequest(req.body, kind, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return refuse(*e);
  OpenAiRequest& request = std::get<OpenAiRequest>(parsed);
  if (auto e = CheckModel(request.model)) return refuse(*e);
  if (!request.tools.empty() && request.tool_choice == ToolChoice::kAuto &&
      !(options_.enable_auto_tool_choice && options_.tool_call_parser == "deepseek_v4")) {
    return refuse(ApiError{400,
                           "\"auto\" tool choice requires --enable-auto-tool-choice and "
                           "--tool-call-parser deepseek_v4 on the router",
                           "invalid_request_error", "tool_choice", "unsupported_value"});
  }
  auto prompts = PromptIds(request, handler_->codec());
  if (auto* e = std::get_if<ApiError>(&prompts)) return refuse(*e);
  if (auto e = ResolveSamplingTokens(handler_->codec(), &request.sampling)) return refuse(*e);

  ResponseHeader header{RandomId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"), UnixSeconds(),
                        request.model.empty() ? options_.model_name : request.model};
  auto admitted = OpenAiGeneration::Admit(
      *handler_, request, std::get<std::vector<std::vector<uint32_t>>>(prompts), header, Parsers());
  if (auto* e = std::get_if<ApiError>(&admitted)) return exchange->Reply(Error(*e));
  std::shared_ptr<OpenAiGeneration> generation =
      std::get<std::unique_ptr<OpenAiGeneration>>(std::move(admitted));

  // The generation runs detached; its end answers (and lets go of both).
  if (!request.stream) {
    Spawn(generation->Collect(*exchange),
          [generation, exchange](std::variant<std::string, ApiError> body) {
            if (auto* e = std::get_if<ApiError>(&body)) return exchange->Reply(Error(*e));
            exchange->Reply(Json(std::get<std::string>(std::move(body))));
          });
    return;
  }
  exchange->BeginStream(
      HttpResponse{.content_type = "text/event-stream",
                   .headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}});
  Spawn(generation->Stream(*exchange), [generation, exchange] { exchange->EndStream(); });
}

HttpResponse HttpServer::HandleModels() {
  json model = {{"id", options_.model_name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "pdspark"},
                {"root", options_.model_path.empty() ? options_.model_name : options_.model_path},
                {"max_model_len", handler_->options().max_model_len}};
  return Json(json({{"object", "list"}, {"data", json::array({model})}}).dump());
}

HttpResponse HttpServer::HandleTokenize(const HttpRequest& req) {
  // {"prompt": ...} tokenizes as a completion (BOS first unless add_special_tokens is false),
  // {"messages": [...]} through the chat template, exactly as a request would be.
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    return Error(
        {400, "the body must be a JSON object", "invalid_request_error", "", "invalid_json"});
  }
  const ApiKind kind = body.contains("messages") ? ApiKind::kChat : ApiKind::kCompletion;
  ParseLimits limits;
  limits.max_body_bytes = options_.transport.max_body_bytes;
  ParseResult parsed = ParseOpenAiRequest(req.body, kind, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Error(*e);
  const OpenAiRequest& request = std::get<OpenAiRequest>(parsed);
  if (auto e = CheckModel(request.model)) return Error(*e);
  const json& add_special =
      body.contains("add_special_tokens") ? body["add_special_tokens"] : json(true);
  if (!add_special.is_boolean()) {
    return Error({400, "'add_special_tokens' must be a boolean", "invalid_request_error",
                  "add_special_tokens", "invalid_type"});
  }
  if (request.prompts.size() > 1) {
    return Error(
        {400, "/tokenize takes one prompt", "invalid_request_error", "prompt", "invalid_value"});
  }
  auto ids = PromptIds(request, handler_->codec());
  if (auto* e = std::get_if<ApiError>(&ids)) return Error(*e);
  std::vector<uint32_t> tokens = std::get<std::vector<std::vector<uint32_t>>>(ids).front();
  if (kind == ApiKind::kCompletion && request.prompts[0].text && !add_special.get<bool>()) {
    // The text alone, without the BOS a completion request gets.
    StatusOr<std::vector<uint32_t>> plain =
        handler_->codec().Encode(*request.prompts[0].text, true);
    if (!plain.ok()) {
      return Error({400, std::string(plain.status().message()), "invalid_request_error", "prompt",
                    "invalid_value"});
    }
    tokens = *std::move(plain);
  }
  return Json(json({{"count", tokens.size()},
                    {"max_model_len", handler_->options().max_model_len},
                    {"tokens", tokens},
                    {"token_strs", nullptr}})
                  .dump());
}

HttpResponse HttpServer::HandleDetokenize(const HttpRequest& req) {
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const json* tokens = body.is_object() && body.contains("tokens") ? &body["tokens"] : nullptr;
  if (tokens == nullptr || !tokens->is_array()) {
    return Error({400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens",
                  "invalid_type"});
  }
  const json& model = body.contains("model") ? body["model"] : json("");
  if (auto e = CheckModel(model.is_string() ? model.get<std::string>() : model.dump())) {
    return Error(*e);
  }
  const TextCodec& codec = handler_->codec();
  auto detokenizer = codec.NewDetokenizer(/*skip_special_tokens=*/false);
  std::string text;
  for (const json& id : *tokens) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(codec.vocab_size())) {
      return Error({400,
                    absl::StrCat("'tokens' holds ", id.dump(), ", not a token id in [0, ",
                                 codec.vocab_size(), ")"),
                    "invalid_request_error", "tokens", "invalid_value"});
    }
    text += detokenizer->Push(id.get<uint32_t>());
  }
  text += detokenizer->Flush();
  return Json(json({{"prompt", text}}).dump());
}

HttpResponse HttpServer::HandleHealth() {
  const size_t decode = registry_->Healthy(v1::WORKER_ROLE_DECODE).size();
  const size_t prefill = registry_->Healthy(v1::WORKER_ROLE_PREFILL).size();
  return Json(json({{"status", decode > 0 ? "ok" : "no_healthy_decode_worker"},
                    {"decode_workers", decode},
                    {"prefill_workers", prefill}})
                  .dump(),
              decode > 0 ? 200 : 503);
}

}  // namespace pdspark::router
