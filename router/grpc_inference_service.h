// The gRPC client API (`pdspark.v1.Inference`): Generate streams token ids and text deltas,
// Abort cancels by request id, ListModels and Health describe the deployment. On gRPC's callback
// API: a stream holds no thread while it waits for its worker or its client.
#pragma once

#include <string>

#include "pdspark/v1/inference.grpc.pb.h"
#include "router/rate_limiter.h"
#include "router/request_handler.h"
#include "router/worker_registry.h"

namespace pdspark::router {

// Generate takes its request as raw bytes and parses it itself, so a request that is not a
// valid GenerateRequest (a `text` that is not UTF-8) gets INVALID_ARGUMENT saying so; the gRPC
// library would answer UNIMPLEMENTED.
class GrpcInferenceService final
    : public v1::Inference::WithRawCallbackMethod_Generate<v1::Inference::CallbackService> {
 public:
  GrpcInferenceService(RequestHandler* handler, WorkerRegistry* registry, std::string model_name)
      : handler_(handler), registry_(registry), model_name_(std::move(model_name)) {}

  // Every call needs metadata `authorization: Bearer <api_key>` when api_key is not empty;
  // Generate calls take a token from `limiter` (may be null). Call before serving.
  void SetAccessControl(std::string api_key, RateLimiter* limiter) {
    api_key_ = std::move(api_key);
    limiter_ = limiter;
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;

 private:
  // The request as the handler takes it; an ApiError for bad input.
  std::variant<GenerateInput, ApiError> ToInput(const grpc::ServerContextBase& context,
                                                const v1::GenerateRequest& request) const;

  // OK, UNAUTHENTICATED (wrong or missing key) or RESOURCE_EXHAUSTED (rate limit).
  grpc::Status CheckAccess(const grpc::ServerContextBase& context, bool generate) const;

  RequestHandler* handler_;
  WorkerRegistry* registry_;
  std::string model_name_;
  std::string api_key_;
  RateLimiter* limiter_ = nullptr;
};

}  // namespace pdspark::router
