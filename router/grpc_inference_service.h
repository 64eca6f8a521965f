// The gRPC client API (`pdspark.v1.Inference`): Generate streams token ids and text deltas,
// Abort cancels by request id, ListModels and Health describe the deployment.
#pragma once

#include <string>

#include "pdspark/v1/inference.grpc.pb.h"
#include "router/rate_limiter.h"
#include "router/request_handler.h"
#include "router/worker_registry.h"

namespace pdspark::router {

class GrpcInferenceService final : public v1::Inference::Service {
 public:
  GrpcInferenceService(RequestHandler* handler, WorkerRegistry* registry, std::string model_name)
      : handler_(handler), registry_(registry), model_name_(std::move(model_name)) {}

  // Every call needs metadata `authorization: Bearer <api_key>` when api_key is not empty;
  // Generate calls take a token from `limiter` (may be null). Call before serving.
  void SetAccessControl(std::string api_key, RateLimiter* limiter) {
    api_key_ = std::move(api_key);
    limiter_ = limiter;
  }

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest* request,
                      v1::HealthResponse* response) override;

 private:
  // The request as the handler takes it; an ApiError for bad input.
  std::variant<GenerateInput, ApiError> ToInput(const grpc::ServerContext& context,
                                                const v1::GenerateRequest& request) const;

  // OK, UNAUTHENTICATED (wrong or missing key) or RESOURCE_EXHAUSTED (rate limit).
  grpc::Status CheckAccess(const grpc::ServerContext& context, bool generate) const;

  RequestHandler* handler_;
  WorkerRegistry* registry_;
  std::string model_name_;
  std::string api_key_;
  RateLimiter* limiter_ = nullptr;
};

}  // namespace pdspark::router
