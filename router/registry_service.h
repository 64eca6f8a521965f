// The gRPC `Registry` service: workers register, heartbeat their load and drain through it.
#pragma once

#include "pdspark/v1/registry.grpc.pb.h"
#include "router/worker_registry.h"

namespace pdspark::router {

class RegistryService final : public v1::Registry::Service {
 public:
  explicit RegistryService(WorkerRegistry* registry) : registry_(registry) {}

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                     v1::DrainResponse* response) override;

 private:
  WorkerRegistry* registry_;
};

}  // namespace pdspark::router
