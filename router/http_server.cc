#include "router/http_server.h"

#include <sys/socket.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/security/api_key.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "router/connection_probe.h"
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

void SendError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  // Every 429 (rate limiter, --max-queue) says when to come back, as clients' retry logic
  // (the openai SDKs) reads it.
  if (error.http_status == 429) res.set_header("Retry-After", "1");
  res.set_content(FormatErrorBody(error), kJson);
}

std::unique_ptr<httplib::Server> MakeServer(const security::TlsOptions& tls) {
  if (tls.cert_file.empty()) return std::make_unique<httplib::Server>();
  // SSLServer verifies client certificates against the CA whenever one is given; only pass it
  // when they are required, so plain HTTPS clients (curl, OpenAI SDKs) can connect otherwise.
  return std::make_unique<httplib::SSLServer>(
      tls.cert_file.c_str(), tls.key_file.c_str(),
      tls.require_client_cert && !tls.ca_file.empty() ? tls.ca_file.c_str() : nullptr);
}

}  // namespace

HttpServer::HttpServer(Options options, RequestHandler* handler, WorkerRegistry* registry,
                       RouterMetrics* metrics)
    : options_(std::move(options)),
      handler_(handler),
      registry_(registry),
      metrics_(metrics),
      server_(MakeServer(options_.tls)),
      created_(UnixSeconds()) {}

bool HttpServer::RefuseBeforeRouting(const httplib::Request& req, httplib::Response& res) {
  if (req.path.rfind("/v1/", 0) != 0) return false;  // /health, /metrics: open for probes
  if (!security::AuthorizationMatches(req.get_header_value("Authorization"), options_.api_key)) {
    metrics_->Rejected("unauthenticated");
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(res, ApiError{401,
                            req.has_header("Authorization")
                                ? "Incorrect API key provided."
                                : "You didn't provide an API key. Send it as 'Authorization: "
                                  "Bearer <key>'.",
                            "invalid_request_error", "", "invalid_api_key"});
    return true;
  }
  if (options_.rate_limiter != nullptr && req.method == "POST") {
    const RateLimiter::Verdict verdict = options_.rate_limiter->Acquire(req.remote_addr);
    if (verdict != RateLimiter::Verdict::kAllowed) {
      metrics_->Rejected("rate_limited");
      SendError(res, ApiError{429,
                              verdict == RateLimiter::Verdict::kClientLimited
                                  ? "Rate limit reached for this client; retry later."
                                  : "Rate limit reached for this server; retry later.",
                              "rate_limit_error", "", "rate_limit_exceeded"});
      return true;
    }
  }
  return false;
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  if (!server_->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot start HTTPS with --tls-cert '", options_.tls.cert_file, "', --tls-key '",
        options_.tls.key_file, "'", options_.tls.require_client_cert ? " and --tls-ca '" : "",
        options_.tls.require_client_cert ? options_.tls.ca_file + "'" : "",
        ": unreadable or mismatched PEM files"));
  }
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return RefuseBeforeRouting(req, res) ? httplib::Server::HandlerResponse::Handled
                                         : httplib::Server::HandlerResponse::Unhandled;
  });
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_request_bytes);
  // Bodies httplib refuses itself (413, 404, ...) still get an OpenAI-style error body.
  server_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e{res.status, absl::StrCat("HTTP error ", res.status), "invalid_request_error", "",
                   ""};
        if (res.status == 413) {
          e.message = "the request body exceeds the size limit";
          e.code = "request_too_large";
        } else if (res.status == 400) {
          // httplib could not read the request: a malformed head, or a body shorter than its
          // Content-Length (the client stopped sending or half-closed the connection).
          e.message =
              "the HTTP request could not be read: malformed, or its body ended before the "
              "announced Content-Length";
          e.code = "incomplete_request";
        } else if (res.status == 404) {
          e.message = "no such endpoint";
          e.type = "not_found_error";
        }
        res.set_content(FormatErrorBody(e), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(ApiKind::kCompletion, req, res);
  });
  server_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleGenerate(ApiKind::kChat, req, res);
                });
  server_->Get("/v1/models",
               [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); });
  server_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    HandleTokenize(req, res);
  });
  server_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    HandleDetokenize(req, res);
  });
  server_->Get("/health",
               [this](const httplib::Request&, httplib::Response& res) { HandleHealth(res); });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(metrics_->Scrape(*registry_), "text/plain; version=0.0.4");
    } catch (const std::exception& e) {
      LOG_ERROR("metrics scrape failed: {}", e.what());
      res.status = 500;
      res.set_content(e.what(), "text/plain");
    }
  });
  // httplib listens with a backlog of 5, which drops connections when many clients connect at
  // once (a benchmark's burst); remember the socket and listen again with a deep backlog.
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = sock;
  });
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
  } else {
    port_ = server_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind HTTP ", options_.host, ":", options_.port));
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
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

void HttpServer::HandleGenerate(ApiKind kind, const httplib::Request& req, httplib::Response& res) {
  auto refuse = [&](const ApiError& e) {
    metrics_->Rejected("invalid");
    metrics_->RequestFinished("invalid", "");
    SendError(res, e);
  };
  ParseLimits limits;
  limits.max_body_bytes = options_.max_request_bytes;
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
  if (auto* e = std::get_if<ApiError>(&admitted)) return SendError(res, *e);
  std::shared_ptr<OpenAiGeneration> generation =
      std::get<std::unique_ptr<OpenAiGeneration>>(std::move(admitted));
  auto probe = std::make_shared<ConnectionProbe>(req.local_addr, req.local_port, req.remote_addr,
                                                 req.remote_port);
  LOG_DEBUG("connection probe found={} local={}:{} remote={}:{}", probe->found(), req.local_addr,
            req.local_port, req.remote_addr, req.remote_port);

  if (!request.stream) {
    auto body = generation->Collect(probe.get());
    if (auto* e = std::get_if<ApiError>(&body)) return SendError(res, *e);
    res.set_content(std::get<std::string>(body), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [generation, probe](size_t, httplib::DataSink& sink) {
        const bool stayed = generation->Stream(probe.get(), [&sink](const std::string& event) {
          return sink.write(event.data(), event.size());
        });
        if (!stayed) return false;
        sink.done();
        return true;
      });
}

void HttpServer::HandleModels(httplib::Response& res) {
  json model = {{"id", options_.model_name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "pdspark"},
                {"root", options_.model_path.empty() ? options_.model_name : options_.model_path},
                {"max_model_len", handler_->options().max_model_len}};
  res.set_content(json({{"object", "list"}, {"data", json::array({model})}}).dump(), kJson);
}

void HttpServer::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  // {"prompt": ...} tokenizes as a completion (BOS first unless add_special_tokens is false),
  // {"messages": [...]} through the chat template, exactly as a request would be.
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    return SendError(
        res, {400, "the body must be a JSON object", "invalid_request_error", "", "invalid_json"});
  }
  const ApiKind kind = body.contains("messages") ? ApiKind::kChat : ApiKind::kCompletion;
  ParseLimits limits;
  limits.max_body_bytes = options_.max_request_bytes;
  ParseResult parsed = ParseOpenAiRequest(req.body, kind, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
  const OpenAiRequest& request = std::get<OpenAiRequest>(parsed);
  if (auto e = CheckModel(request.model)) return SendError(res, *e);
  const json& add_special =
      body.contains("add_special_tokens") ? body["add_special_tokens"] : json(true);
  if (!add_special.is_boolean()) {
    return SendError(res, {400, "'add_special_tokens' must be a boolean", "invalid_request_error",
                           "add_special_tokens", "invalid_type"});
  }
  if (request.prompts.size() > 1) {
    return SendError(res, {400, "/tokenize takes one prompt", "invalid_request_error", "prompt",
                           "invalid_value"});
  }
  auto ids = PromptIds(request, handler_->codec());
  if (auto* e = std::get_if<ApiError>(&ids)) return SendError(res, *e);
  std::vector<uint32_t> tokens = std::get<std::vector<std::vector<uint32_t>>>(ids).front();
  if (kind == ApiKind::kCompletion && request.prompts[0].text && !add_special.get<bool>()) {
    // The text alone, without the BOS a completion request gets.
    StatusOr<std::vector<uint32_t>> plain =
        handler_->codec().Encode(*request.prompts[0].text, true);
    if (!plain.ok()) {
      return SendError(res, {400, std::string(plain.status().message()), "invalid_request_error",
                             "prompt", "invalid_value"});
    }
    tokens = *std::move(plain);
  }
  res.set_content(json({{"count", tokens.size()},
                        {"max_model_len", handler_->options().max_model_len},
                        {"tokens", tokens},
                        {"token_strs", nullptr}})
                      .dump(),
                  kJson);
}

void HttpServer::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const json* tokens = body.is_object() && body.contains("tokens") ? &body["tokens"] : nullptr;
  if (tokens == nullptr || !tokens->is_array()) {
    return SendError(res, {400, "'tokens' must be an array of token ids", "invalid_request_error",
                           "tokens", "invalid_type"});
  }
  const json& model = body.contains("model") ? body["model"] : json("");
  if (auto e = CheckModel(model.is_string() ? model.get<std::string>() : model.dump())) {
    return SendError(res, *e);
  }
  const TextCodec& codec = handler_->codec();
  auto detokenizer = codec.NewDetokenizer(/*skip_special_tokens=*/false);
  std::string text;
  for (const json& id : *tokens) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(codec.vocab_size())) {
      return SendError(res, {400,
                             absl::StrCat("'tokens' holds ", id.dump(), ", not a token id in [0, ",
                                          codec.vocab_size(), ")"),
                             "invalid_request_error", "tokens", "invalid_value"});
    }
    text += detokenizer->Push(id.get<uint32_t>());
  }
  text += detokenizer->Flush();
  res.set_content(json({{"prompt", text}}).dump(), kJson);
}

void HttpServer::HandleHealth(httplib::Response& res) {
  const size_t decode = registry_->Healthy(v1::WORKER_ROLE_DECODE).size();
  const size_t prefill = registry_->Healthy(v1::WORKER_ROLE_PREFILL).size();
  res.status = decode > 0 ? 200 : 503;
  res.set_content(json({{"status", decode > 0 ? "ok" : "no_healthy_decode_worker"},
                        {"decode_workers", decode},
                        {"prefill_workers", prefill}})
                      .dump(),
                  kJson);
}

}  // namespace pdspark::router
