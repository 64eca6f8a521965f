#include "prefill_worker/prefill_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/transport/staged_state.h"
#include "common/worker/event_queue.h"
#include "engine/serving/proto_conversions.h"
#include "pdspark/v1/transfer.pb.h"

namespace pdspark::prefill {
namespace {

v1::PrefillProgress Progress(v1::PrefillProgress::Stage stage) {
  v1::PrefillProgress progress;
  progress.set_stage(stage);
  return progress;
}

grpc::Status Failed(grpc::ServerWriter<v1::PrefillProgress>* writer, const absl::Status& status) {
  v1::PrefillProgress progress = Progress(v1::PrefillProgress::STAGE_FAILED);
  progress.set_error(std::string(status.message()));
  writer->Write(progress);
  return serving::ToGrpcStatus(status);
}

}  // namespace

grpc::Status PrefillService::Prefill(grpc::ServerContext* context,
                                     const v1::PrefillRequest* request,
                                     grpc::ServerWriter<v1::PrefillProgress>* writer) {
  if (request->context().request_id().empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "context.request_id is required"};
  }
  v1::TransferDescriptor descriptor;
  if (!descriptor.ParseFromString(request->transfer_descriptor()) ||
      descriptor.agent_address().empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "transfer_descriptor is missing or malformed"};
  }
  // Refuse to link to a decode worker that runs another model: its cache layout differs.
  if (descriptor.config_fingerprint() != fingerprint_) {
    metrics_->Handshake(false);
    return Failed(writer, absl::FailedPreconditionError(absl::StrCat(
                              "decode worker config fingerprint ", descriptor.config_fingerprint(),
                              " differs from this prefill worker's ", fingerprint_,
                              ": both must load the same model")));
  }
  writer->Write(Progress(v1::PrefillProgress::STAGE_ADMITTED));
  auto result = RunPrefill(context, *request);
  if (!result.ok()) return Failed(writer, result.status());
  // A transfer never waits past the request's deadline nor past the stall timeout.
  const auto deadline =
      std::min(serving::DeadlineFromUnixMicros(request->context().deadline_unix_us()),
               serving::Clock::now() + transfer_timeout_);
  const auto started = serving::Clock::now();
  if (Status st = Deliver(*request, result->state, deadline); !st.ok()) {
    metrics_->Failed(st);
    LOG_WARN("kv transfer failed request={} error={}", request->context().request_id(),
             st.ToString());
    return Failed(writer, st);
  }
  metrics_->Sent(result->state.size(),
                 std::chrono::duration<double>(serving::Clock::now() - started).count());
  v1::PrefillProgress done = Progress(v1::PrefillProgress::STAGE_COMPLETED);
  done.set_first_token_id(static_cast<uint32_t>(result->tokens.at(0)));
  done.set_layers_sent(static_cast<uint32_t>(engine_->model().config().num_hidden_layers));
  writer->Write(done);
  return grpc::Status::OK;
}

StatusOr<serving::RequestEvent> PrefillService::RunPrefill(grpc::ServerContext* context,
                                                           const v1::PrefillRequest& request) {
  serving::RequestSpec spec;
  spec.id = serving::EngineRequestId(request.context());
  spec.prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  spec.sampling = serving::FromProto(request.sampling());
  spec.deadline = serving::DeadlineFromUnixMicros(request.context().deadline_unix_us());
  spec.prefill_only = true;
  auto queue = std::make_shared<worker::EventQueue>();
  RETURN_IF_ERROR(
      engine_->Submit(spec, [queue](const serving::RequestEvent& e) { queue->Push(e); }));
  bool cancelled = false;
  while (true) {
    auto event = queue->PopFor(std::chrono::milliseconds(50));
    if (!event) {
      if (context->IsCancelled() && !cancelled) cancelled = engine_->Cancel(spec.id);
      continue;
    }
    if (event->outcome == serving::Outcome::kRunning) continue;
    if (event->outcome == serving::Outcome::kCancelled) return absl::CancelledError("cancelled");
    if (event->outcome == serving::Outcome::kFailed) {
      return absl::InternalError(absl::StrCat("prefill failed: ", event->error));
    }
    if (event->tokens.empty() || event->state.empty()) {
      return absl::InternalError("prefill produced no first token or state");
    }
    return std::move(*event);
  }
}

Status PrefillService::Deliver(const v1::PrefillRequest& request, const std::string& state,
                               serving::Clock::time_point deadline) {
  v1::TransferDescriptor descriptor;
  descriptor.ParseFromString(request.transfer_descriptor());
  ASSIGN_OR_RETURN(const auto region, transport::RemoteRegion::Deserialize(descriptor.region()));
  const transport::StagedHeader header = transport::MakeStagedHeader(state);
  if (sizeof(header) + state.size() > descriptor.capacity()) {
    return absl::OutOfRangeError(absl::StrCat("state of ", state.size(),
                                              " bytes exceeds the reservation of ",
                                              descriptor.capacity(), " bytes"));
  }
  // Endpoints are cached per decode incarnation: a restarted decode worker gets a new link.
  const Status linked = agent_->Connect(descriptor.incarnation_id(), descriptor.agent_address());
  metrics_->Handshake(linked.ok());
  RETURN_IF_ERROR(linked);
  // Write() returns after remote completion; the router tells the decode worker to continue
  // only then, and the header's checksum lets it reject a partial delivery anyway.
  return agent_->Write(descriptor.incarnation_id(), region,
                       {{state.data(), state.size(), descriptor.offset() + sizeof(header)},
                        {&header, sizeof(header), descriptor.offset()}},
                       deadline);
}

grpc::Status PrefillService::Cancel(grpc::ServerContext*, const v1::CancelRequest* request,
                                    v1::CancelResponse* response) {
  response->set_found(serving::CancelAllAttempts(*engine_, request->request_id()));
  return grpc::Status::OK;
}

grpc::Status PrefillService::Stats(grpc::ServerContext*, const v1::StatsRequest*,
                                   v1::StatsResponse* response) {
  const serving::ServingStats stats = engine_->Stats();
  response->set_running_requests(static_cast<uint32_t>(stats.running));
  response->set_waiting_requests(static_cast<uint32_t>(stats.waiting));
  response->set_used_cache_blocks(static_cast<uint64_t>(stats.cache_blocks_in_use));
  response->set_used_cache_bytes(static_cast<uint64_t>(stats.cache_bytes_in_use));
  return grpc::Status::OK;
}

}  // namespace pdspark::prefill
