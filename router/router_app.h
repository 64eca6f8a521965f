// The whole router in one object: registry, scheduler, admission, request path, the gRPC server
// (Registry + Inference, with reflection) and the HTTP server. main() and the in-process
// integration tests both build one of these.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/security/tls_options.h"
#include "router/admission_control.h"
#include "router/clock.h"
#include "router/grpc_inference_service.h"
#include "router/http_server.h"
#include "router/rate_limiter.h"
#include "router/registry_service.h"
#include "router/request_handler.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"
#include "router/text_codec.h"
#include "router/worker_channels.h"
#include "router/worker_registry.h"

namespace grpc {
class Server;
}

namespace pdspark::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int http_port = 0;  // 0: pick a free port
  int grpc_port = 0;
  std::string model_name = "pdspark";
  std::string model_path;
  // "deepseek_v4" or empty (HttpServer::Options::reasoning_parser, tool_call_parser).
  std::string reasoning_parser;
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  uint32_t max_model_len = 4096;
  SchedulingPolicy prefill_policy = SchedulingPolicy::kLeastLoaded;
  SchedulingPolicy decode_policy = SchedulingPolicy::kLeastLoaded;
  uint32_t max_queue = 256;  // requests in the router at once; beyond: 429
  std::chrono::milliseconds heartbeat_interval{1000};
  size_t max_request_bytes = 8u << 20;
  std::chrono::milliseconds default_timeout{600'000};
  uint32_t disagg_min_prompt_tokens = 0;  // shorter prompts prefill on the decode worker
  std::chrono::milliseconds reservation_lease{30'000};
  std::chrono::milliseconds reserve_wait{10'000};  // RequestHandler::Options::reserve_wait
  // docs/reliability.md: attempts per stage and the stall timers.
  uint32_t max_attempts = 3;
  std::chrono::milliseconds prefill_attempt_timeout{30'000};
  std::chrono::milliseconds decode_stall_timeout{60'000};
  // Security (docs/reliability.md "Security"). TLS for both gRPC servers, the links to the
  // workers and (as HTTPS) the HTTP API; all off by default.
  security::TlsOptions tls;
  // Required on the client API (HTTP and gRPC Inference) when not empty.
  std::string api_key;
  // The Registry (worker register/heartbeat/drain) on its own gRPC port, so it is not reachable
  // through the client port: -1 keeps it on grpc_port (the single-port layout), 0 = any port.
  int registry_port = -1;
  RateLimiter::Options rate_limit;
};

class RouterApp {
 public:
  // `codec` and `clock` must outlive the app; a null clock means the steady clock.
  RouterApp(RouterOptions options, const TextCodec* codec, const Clock* clock = nullptr);
  ~RouterApp();

  Status Start();
  // Refuses new requests, lets those in flight finish for `grace`, cancels the rest (freeing
  // their cache on the workers), then stops both servers.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  int http_port() const { return http_->port(); }
  int grpc_port() const { return grpc_port_; }
  // The port workers register on: grpc_port() unless a separate registry port was asked for.
  int registry_port() const { return registry_port_ != 0 ? registry_port_ : grpc_port_; }
  WorkerRegistry& registry() { return registry_; }
  RequestHandler& handler() { return *handler_; }
  RouterMetrics& metrics() { return metrics_; }

 private:
  RouterOptions options_;
  SteadyClock steady_clock_;
  WorkerRegistry registry_;
  Scheduler scheduler_;
  AdmissionController admission_;
  WorkerChannels channels_;
  RouterMetrics metrics_;
  std::unique_ptr<RequestHandler> handler_;
  RegistryService registry_service_;
  std::unique_ptr<GrpcInferenceService> inference_service_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<grpc::Server> registry_server_;  // only with a separate registry port
  std::unique_ptr<RateLimiter> rate_limiter_;
  int grpc_port_ = 0;
  int registry_port_ = 0;
  bool stopped_ = false;
};

}  // namespace pdspark::router
