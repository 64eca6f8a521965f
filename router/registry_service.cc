#include "router/registry_service.h"

namespace pdspark::router {

grpc::Status RegistryService::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                       v1::RegisterResponse* response) {
  if (request->role() != v1::WORKER_ROLE_PREFILL && request->role() != v1::WORKER_ROLE_DECODE) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "role must be PREFILL or DECODE");
  }
  if (request->address().empty() || request->incarnation_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "address and incarnation_id are required");
  }
  response->set_worker_id(registry_->Register(*request));
  response->set_heartbeat_interval_ms(
      static_cast<uint32_t>(registry_->heartbeat_interval().count()));
  return grpc::Status::OK;
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                        v1::HeartbeatResponse* response) {
  response->set_known(
      registry_->Heartbeat(request->worker_id(), request->incarnation_id(), request->load()));
  return grpc::Status::OK;
}

grpc::Status RegistryService::Drain(grpc::ServerContext*, const v1::DrainRequest* request,
                                    v1::DrainResponse*) {
  if (!registry_->Drain(request->worker_id())) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker_id");
  }
  return grpc::Status::OK;
}

}  // namespace pdspark::router
