#include "router/router_app.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/security/grpc_credentials.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace pdspark::router {

RouterApp::RouterApp(RouterOptions options, const TextCodec* codec, const Clock* clock)
    : options_(std::move(options)),
      registry_(clock != nullptr ? clock : &steady_clock_, options_.heartbeat_interval),
      scheduler_(&registry_, options_.prefill_policy, options_.decode_policy),
      admission_(options_.max_queue),
      metrics_(options_.model_name),
      registry_service_(&registry_),
      rate_limiter_(std::make_unique<RateLimiter>(options_.rate_limit)) {
  RequestHandler::Options handler_options;
  handler_options.max_model_len = options_.max_model_len;
  handler_options.default_timeout = options_.default_timeout;
  handler_options.disagg_min_prompt_tokens = options_.disagg_min_prompt_tokens;
  handler_options.reservation_lease = options_.reservation_lease;
  handler_options.reserve_wait = options_.reserve_wait;
  handler_options.max_attempts = options_.max_attempts;
  handler_options.prefill_attempt_timeout = options_.prefill_attempt_timeout;
  handler_options.decode_stall_timeout = options_.decode_stall_timeout;
  handler_ = std::make_unique<RequestHandler>(handler_options, &scheduler_, &admission_, codec,
                                              &channels_, &metrics_);
  inference_service_ =
      std::make_unique<GrpcInferenceService>(handler_.get(), &registry_, options_.model_name);
  inference_service_->SetAccessControl(options_.api_key, rate_limiter_.get());
  HttpServer::Options http_options;
  http_options.transport.host = options_.host;
  http_options.transport.port = options_.http_port;
  http_options.transport.max_body_bytes = options_.max_request_bytes;
  http_options.transport.tls = options_.tls;
  http_options.model_name = options_.model_name;
  http_options.model_path = options_.model_path;
  http_options.api_key = options_.api_key;
  http_options.rate_limiter = rate_limiter_.get();
  http_options.reasoning_parser = options_.reasoning_parser;
  http_options.tool_call_parser = options_.tool_call_parser;
  http_options.enable_auto_tool_choice = options_.enable_auto_tool_choice;
  // Event-loop threads: parsing, tokenization and SSE formatting, never a request's wait.
  http_options.transport.threads =
      static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
  http_ = std::make_unique<HttpServer>(http_options, handler_.get(), &registry_, &metrics_);
}

RouterApp::~RouterApp() { Shutdown(); }

Status RouterApp::Start() {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> server_credentials,
                   security::MakeServerCredentials(options_.tls));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> worker_credentials,
                   security::MakeChannelCredentials(options_.tls));
  channels_.SetCredentials(worker_credentials, options_.tls);
  const bool separate_registry = options_.registry_port >= 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.grpc_port), server_credentials,
                           &grpc_port_);
  if (!separate_registry) builder.RegisterService(&registry_service_);
  builder.RegisterService(inference_service_.get());
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<size_t>(options_.max_request_bytes, INT32_MAX)));
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind gRPC ", options_.host, ":", options_.grpc_port));
  }
  if (separate_registry) {
    grpc::ServerBuilder registry_builder;
    registry_builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.registry_port),
                                      server_credentials, &registry_port_);
    registry_builder.RegisterService(&registry_service_);
    registry_server_ = registry_builder.BuildAndStart();
    if (registry_server_ == nullptr || registry_port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot bind the registry gRPC port ",
                                                 options_.host, ":", options_.registry_port));
    }
  }
  RETURN_IF_ERROR(http_->Start());
  LOG_INFO("router listening http={}:{} grpc={}:{} model={} policy={} max_queue={}", options_.host,
           http_->port(), options_.host, grpc_port_, options_.model_name,
           SchedulingPolicyName(options_.decode_policy), options_.max_queue);
  LOG_INFO("router security tls={} mtls={} api_key={} registry_port={} rate_limit_rps={}/{}",
           options_.tls.enabled(), options_.tls.require_client_cert, !options_.api_key.empty(),
           registry_port(), options_.rate_limit.per_client_rps, options_.rate_limit.global_rps);
  return absl::OkStatus();
}

void RouterApp::Shutdown(std::chrono::milliseconds grace) {
  if (stopped_) return;
  stopped_ = true;
  handler_->Drain(grace);
  if (http_) http_->Stop();
  if (grpc_server_) {
    // Streams still open get this long to finish before being cancelled.
    grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc_server_->Wait();
  }
  if (registry_server_) {
    registry_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    registry_server_->Wait();
  }
}

}  // namespace pdspark::router
