// The OpenAI-compatible HTTP API: POST /v1/completions, POST /v1/chat/completions (JSON or SSE
// streaming), GET /v1/models, GET /health (200 only with a healthy decode worker), GET /metrics.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/base/status.h"
#include "common/security/tls_options.h"
#include "router/openai_generation.h"
#include "router/openai_protocol.h"
#include "router/rate_limiter.h"
#include "router/request_handler.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace pdspark::router {

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port
    size_t max_request_bytes = 8u << 20;
    // The name clients put in "model"; the model directory path is accepted too.
    std::string model_name;
    std::string model_path;
    // Each streaming request holds a thread for its duration.
    int threads = 64;
    // Required as `Authorization: Bearer <key>` on /v1/*; /health and /metrics stay open.
    std::string api_key;
    // HTTPS when tls has a certificate; client certificates are required with
    // tls.require_client_cert.
    security::TlsOptions tls;
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

  // Binds and starts serving on a background thread.
  Status Start();
  void Stop();
  int port() const { return port_; }

 private:
  // Authentication and rate limits before any handler runs: true when `res` is the answer.
  bool RefuseBeforeRouting(const httplib::Request& req, httplib::Response& res);
  void HandleGenerate(ApiKind kind, const httplib::Request& req, httplib::Response& res);
  void HandleModels(httplib::Response& res);
  // vLLM's /tokenize and /detokenize: what the router would feed the model, and back.
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleHealth(httplib::Response& res);
  OpenAiGeneration::Parsers Parsers() const;
  std::optional<ApiError> CheckModel(const std::string& model) const;

  Options options_;
  RequestHandler* handler_;
  WorkerRegistry* registry_;
  RouterMetrics* metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  int64_t created_ = 0;
};

}  // namespace pdspark::router
