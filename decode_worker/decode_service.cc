#include "decode_worker/decode_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine_service/event_queue.h"
#include "engine_service/proto_conversions.h"

namespace pdspark::decode {
namespace {

// A request waiting in the engine's queue for KV pool space streams nothing, and the router
// gives up on a call without progress (--decode-stall-timeout-ms). While the request waits and
// the engine keeps stepping (so it is not wedged), an empty message every half second says so.
class QueueKeepalive {
 public:
  QueueKeepalive(const serving::ServingEngine& engine, std::string id)
      : engine_(engine), id_(std::move(id)), steps_(engine.Stats().steps) {}

  bool Due() {
    const auto now = serving::Clock::now();
    if (now - last_ < std::chrono::milliseconds(500)) return false;
    last_ = now;
    const int64_t steps = engine_.Stats().steps;
    const bool alive = steps != steps_;
    steps_ = steps;
    return alive && engine_.IsQueued(id_);
  }

 private:
  const serving::ServingEngine& engine_;
  const std::string id_;
  int64_t steps_;
  serving::Clock::time_point last_ = serving::Clock::now();
};

}  // namespace

grpc::Status DecodeService::Generate(grpc::ServerContext* context,
                                     const v1::WorkerGenerateRequest* request,
                                     grpc::ServerWriter<v1::WorkerGenerateResponse>* writer) {
  if (request->context().request_id().empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "context.request_id is required"};
  }
  serving::RequestSpec spec;
  spec.id = serving::EngineRequestId(request->context());
  spec.prompt.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
  spec.generated.assign(request->generated_token_ids().begin(),
                        request->generated_token_ids().end());
  auto sampling = serving::FromProto(request->sampling());
  if (!sampling.ok()) return serving::ToGrpcStatus(sampling.status());
  spec.sampling = std::move(sampling).value();
  if (!request->reservation_id().empty()) {
    if (receiver_ == nullptr) {
      return {grpc::StatusCode::FAILED_PRECONDITION, "this decode worker has no KV transport"};
    }
    // Verified and restored here, on the gRPC thread, so the engine loop never stalls on it.
    auto ring = engine_->NewDrafterState();
    if (!ring.ok()) {
      receiver_->Release(request->reservation_id(), /*transfer_completed=*/true);
      return serving::ToGrpcStatus(ring.status());
    }
    auto state = receiver_->Take(request->reservation_id(), std::move(ring).value());
    if (!state.ok()) return serving::ToGrpcStatus(state.status());
    spec.prefilled = std::move(state).value();
  }
  spec.deadline = serving::DeadlineFromUnixMicros(request->context().deadline_unix_us());
  if (context->deadline() != std::chrono::system_clock::time_point::max()) {
    spec.deadline =
        std::min(spec.deadline,
                 serving::Clock::now() + (context->deadline() - std::chrono::system_clock::now()));
  }
  auto queue = std::make_shared<worker::EventQueue>();
  const absl::Status submitted =
      engine_->Submit(spec, [queue](const serving::RequestEvent& e) { queue->Push(e); });
  if (!submitted.ok()) return serving::ToGrpcStatus(submitted);

  bool cancel_sent = false;
  QueueKeepalive keepalive(*engine_, spec.id);
  while (true) {
    auto event = queue->PopFor(std::chrono::milliseconds(50));
    if (!event) {
      // Client went away (router cancelled, deadline): stop the work and free its cache.
      if (context->IsCancelled() && !cancel_sent) {
        engine_->Cancel(spec.id);
        cancel_sent = true;
      }
      if (!cancel_sent && keepalive.Due() && !writer->Write(v1::WorkerGenerateResponse())) {
        engine_->Cancel(spec.id);
        cancel_sent = true;
      }
      continue;
    }
    v1::WorkerGenerateResponse response;
    response.mutable_token_ids()->Assign(event->tokens.begin(), event->tokens.end());
    serving::AppendLogprobs(event->logprobs, response.mutable_logprobs());
    serving::AppendLogprobs(event->prompt_logprobs, response.mutable_prompt_logprobs());
    const bool last = event->outcome != serving::Outcome::kRunning;
    if (last) {
      response.set_finish_reason(serving::ToProto(event->finish_reason, event->outcome));
      *response.mutable_spec() = serving::ToProto(event->spec);
      response.set_cached_prompt_tokens(static_cast<uint32_t>(event->cached_tokens));
      if (event->outcome == serving::Outcome::kFailed) response.set_error(event->error);
    }
    if (!cancel_sent && !writer->Write(response)) {
      engine_->Cancel(spec.id);
      cancel_sent = true;
    }
    if (!last) continue;
    if (event->outcome == serving::Outcome::kCancelled) {
      return {grpc::StatusCode::CANCELLED, "request cancelled"};
    }
    if (event->outcome == serving::Outcome::kFailed &&
        event->error.find("deadline") != std::string::npos) {
      return {grpc::StatusCode::DEADLINE_EXCEEDED, event->error};
    }
    return grpc::Status::OK;
  }
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
