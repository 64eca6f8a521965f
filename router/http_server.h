// The OpenAI-compatible HTTP API: POST /v1/completions, POST /v1/chat/completions (JSON or SSE
// streaming), GET /v1/models, GET /health (200 only with a healthy decode worker), GET /metrics,
// POST /tokenize and /detokenize. On the event-driven HttpTransport: a request waiting for its
// worker or its client holds no thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/base/status.h"
#include "common/security/tls_options.h"
#include "router/http_transport.h"
#include "router/openai_generation.h"
#include "router/openai_protocol.h"
#include "router/rate_limiter.h"
#include "router/request_handler.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"

namespace pdspark::router {

class HttpServer {
 public:
  struct Options {
    // Address, event-loop threads (HTTP parsing, tokenization, SSE formatting; requests hold
    // none), body limit (also the JSON parser's), HTTPS.
    HttpTransport::Options transport;
    // The name clients put in "model"; the model directory path is accepted too.
    std::string model_name;
    std::string model_path;
    // Required as `Authorization: Bearer <key>` on /v1/*; /health and /metrics stay open.
    std::string api_key;
    RateLimiter* rate_limiter = nullptr;  // generation requests only; null: no limit
    // "deepseek_v4": chat in thinking mode answers reasoning_content apart from content
    // (vLLM's --reasoning-parser); empty: all of it is content.
    std::string reasoning_parser;
    // "deepseek_v4" with enable_auto_tool_choice: chat with tools answers tool_calls (vLLM's
    // --tool-call-parser, --enable-auto-tool-choice).
    std::string tool_call_parser;
    bool enable_auto_tool_choice = false;
  };

  HttpServer(Options options, RequestHandler* handler, WorkerRegistry* registry,
             RouterMetrics* metrics);
  ~HttpServer();

  // Binds and starts serving on background threads.
  Status Start();
  void Stop();
  int port() const { return transport_.port(); }

 private:
  void Handle(const HttpRequest& req, std::shared_ptr<HttpExchange> exchange);
  // Authentication and rate limits before any handler runs: the answer, if refused.
  std::optional<HttpResponse> RefuseBeforeRouting(const HttpRequest& req);
  // Answers through `exchange` when the generation ends; the rest answer at once.
  void HandleGenerate(ApiKind kind, const HttpRequest& req, std::shared_ptr<HttpExchange> exchange);
  HttpResponse HandleModels();
  // vLLM's /tokenize and /detokenize: what the router would feed the model, and back.
  HttpResponse HandleTokenize(const HttpRequest& req);
  HttpResponse HandleDetokenize(const HttpRequest& req);
  HttpResponse HandleHealth();
  HttpResponse HandleMetrics();
  OpenAiGeneration::Parsers Parsers() const;
  std::optional<ApiError> CheckModel(const std::string& model) const;

  Options options_;
  RequestHandler* handler_;
  WorkerRegistry* registry_;
  RouterMetrics* metrics_;
  HttpTransport transport_;
  int64_t created_ = 0;
};

}  // namespace pdspark::router
