// The gRPC client API (`pdspark.v1.Inference`): Generate streams token ids and text deltas,
// Abort cancels by request id, ListModels and Health describe the deployment.
#pragma once

#include <string>

#include "pdspark/v1/inference.grpc.pb.h"
#include "router/request_handler.h"
#include "router/worker_registry.h"

namespace pdspark::router {

class GrpcInferenceService final : public v1::Inference::Service {
 public:
  GrpcInferenceService(RequestHandler* handler, WorkerRegistry* registry, std::string model_name)
      : handler_(handler), registry_(registry), model_name_(std::move(model_name)) {}

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

  RequestHandler* handler_;
  WorkerRegistry* registry_;
  std::string model_name_;
};

}  // namespace pdspark::router
