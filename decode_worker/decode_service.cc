#include "decode_worker/decode_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine_service/proto_conversions.h"

namespace pdspark::decode {

StatusOr<serving::RequestSpec> DecodeService::SpecFor(const grpc::CallbackServerContext& context,
                                                      const v1::WorkerGenerateRequest& request) {
  if (request.context().request_id().empty()) {
    return absl::InvalidArgumentError("context.request_id is required");
  }
  serving::RequestSpec spec;
  spec.id = serving::EngineRequestId(request.context());
  spec.prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  spec.generated.assign(request.generated_token_ids().begin(), request.generated_token_ids().end());
  ASSIGN_OR_RETURN(spec.sampling, serving::FromProto(request.sampling()));
  if (!request.reservation_id().empty()) {
    if (receiver_ == nullptr) {
      return absl::FailedPreconditionError("this decode worker has no KV transport");
    }
    // Verified and restored here, on the gRPC thread, so the engine loop never stalls on it.
    auto ring = engine_->NewDrafterState();
    if (!ring.ok()) {
      receiver_->Release(request.reservation_id(), /*transfer_completed=*/true);
      return ring.status();
    }
    ASSIGN_OR_RETURN(spec.prefilled,
                     receiver_->Take(request.reservation_id(), std::move(ring).value()));
  }
  spec.deadline = serving::DeadlineFromUnixMicros(request.context().deadline_unix_us());
  if (context.deadline() != std::chrono::system_clock::time_point::max()) {
    spec.deadline =
        std::min(spec.deadline,
                 serving::Clock::now() + (context.deadline() - std::chrono::system_clock::now()));
  }
  return spec;
}

grpc::ServerWriteReactor<v1::WorkerGenerateResponse>* DecodeService::Generate(
    grpc::CallbackServerContext* context, const v1::WorkerGenerateRequest* request) {
  auto spec = SpecFor(*context, *request);
  if (!spec.ok()) return new GenerateStream(serving::ToGrpcStatus(spec.status()));
  return new GenerateStream(engine_, &pump_, std::move(spec).value());
}

grpc::Status DecodeService::Reserve(grpc::ServerContext*, const v1::ReserveRequest* request,
                                    v1::ReserveResponse* response) {
  if (receiver_ == nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION, "this decode worker has no KV transport"};
  }
  const int64_t context = request->prompt_tokens();
  if (context <= 0 || context >= engine_->max_model_len()) {
    return {
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("prompt_tokens ", context, " outside [1, ", engine_->max_model_len(), ")")};
  }
  auto reserved = receiver_->Reserve(*request);
  if (!reserved.ok()) return serving::ToGrpcStatus(reserved.status());
  *response = std::move(reserved).value();
  return grpc::Status::OK;
}

grpc::Status DecodeService::Release(grpc::ServerContext*, const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse*) {
  if (receiver_ != nullptr) {
    receiver_->Release(request->reservation_id(), request->transfer_completed());
  }
  return grpc::Status::OK;
}

grpc::Status DecodeService::Cancel(grpc::ServerContext*, const v1::CancelRequest* request,
                                   v1::CancelResponse* response) {
  response->set_found(serving::CancelAllAttempts(*engine_, request->request_id()));
  return grpc::Status::OK;
}

grpc::Status DecodeService::Stats(grpc::ServerContext*, const v1::StatsRequest*,
                                  v1::StatsResponse* response) {
  const serving::ServingStats stats = engine_->Stats();
  response->set_running_requests(static_cast<uint32_t>(stats.running));
  response->set_waiting_requests(static_cast<uint32_t>(stats.waiting));
  response->set_used_cache_blocks(static_cast<uint64_t>(stats.cache_blocks_in_use));
  response->set_used_cache_bytes(static_cast<uint64_t>(stats.cache_bytes_in_use));
  if (receiver_ != nullptr) {
    response->set_active_reservations(static_cast<uint64_t>(receiver_->Stats().active));
  }
  return grpc::Status::OK;
}

}  // namespace pdspark::decode
