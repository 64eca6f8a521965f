#include "prefill_worker/prefill_service.h"

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "engine_service/proto_conversions.h"

namespace pdspark::prefill {
namespace {

using transport::Clock;
using transport::FailureReason;
using transport::TransferError;

// The prefill side stops writing this long before the decode worker's lease runs out, so that
// a late write cannot land in memory the decode side has handed to another request.
constexpr auto kLeaseMargin = std::chrono::milliseconds(500);
// How long a new KV link's wire-up may take before the request fails over (a live peer
// answers in a round trip).
constexpr auto kLinkUpTimeout = std::chrono::milliseconds(2000);

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

Status FromEngine(const serving::RequestEvent& event) {
  switch (event.outcome) {
    case serving::Outcome::kCancelled:
      return TransferError(FailureReason::kCancelled, absl::StatusCode::kCancelled,
                           "prefill cancelled");
    case serving::Outcome::kFailed:
      return absl::InternalError(absl::StrCat("prefill failed: ", event.error));
    default:
      if (event.tokens.empty()) return absl::InternalError("prefill produced no first token");
      return absl::OkStatus();
  }
}

// The decode pages every group's rows go to: as many as the rows span, each inside the pool.
StatusOr<std::vector<std::vector<int32_t>>> CheckPageTables(
    const v1::TransferDescriptor& descriptor, const engine::StagingLayout& layout,
    const transport::RemoteRegion& pool) {
  if (descriptor.page_tables_size() != static_cast<int>(layout.groups.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reservation has ", descriptor.page_tables_size(), " page tables for ",
                     layout.groups.size(), " cache groups"));
  }
  const uint64_t pool_pages = descriptor.page_bytes() ? pool.size / descriptor.page_bytes() : 0;
  std::vector<std::vector<int32_t>> tables;
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    const auto& pages = descriptor.page_tables(static_cast<int>(i)).pages();
    if (pages.size() != layout.groups[i].PagesSpanned()) {
      return absl::InvalidArgumentError(absl::StrCat("page table ", i, " has ", pages.size(),
                                                     " pages, the rows span ",
                                                     layout.groups[i].PagesSpanned()));
    }
    for (int32_t page : pages) {
      if (page < 0 || static_cast<uint64_t>(page) >= pool_pages) {
        return absl::InvalidArgumentError(
            absl::StrCat("page ", page, " lies outside the decode worker's KV pool"));
      }
    }
    tables.emplace_back(pages.begin(), pages.end());
  }
  return tables;
}

}  // namespace

StatusOr<std::shared_ptr<StateStreamer>> LinkToReservation(serving::ServingEngine& engine,
                                                           transport::TransferAgent& agent,
                                                           const transport::LinkInfo& link,
                                                           const v1::TransferDescriptor& descriptor,
                                                           int64_t prompt, StreamMode mode) {
  const transport::LinkInfo decode{descriptor.config_fingerprint(), descriptor.cache_manifest(),
                                   descriptor.tensor_parallel_size(),
                                   descriptor.drafter_state_bytes()};
  RETURN_IF_ERROR(transport::CheckLink(link, decode));
  if (descriptor.prompt_tokens() != prompt || descriptor.block_rows() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the reservation was laid out for ", descriptor.prompt_tokens(), " prompt tokens (block ",
        descriptor.block_rows(), " rows), the request has ", prompt));
  }
  const engine::CacheLayout& cache_layout = engine.model().cache_layout();
  engine::StagingLayout layout = engine::StagingLayout::Compute(
      cache_layout, prompt, descriptor.block_rows(), decode.drafter_state_bytes);
  if (layout.record_bytes() != descriptor.capacity() ||
      engine::PageGeometry::For(cache_layout, descriptor.block_rows()).page_bytes !=
          static_cast<int64_t>(descriptor.page_bytes())) {
    return TransferError(
        FailureReason::kRefused, absl::StatusCode::kFailedPrecondition,
        absl::StrCat("the decode worker reserved ", descriptor.capacity(),
                     " record bytes and pages of ", descriptor.page_bytes(),
                     ", this worker lays the state out in ", layout.record_bytes(), " and ",
                     engine::PageGeometry::For(cache_layout, descriptor.block_rows()).page_bytes,
                     ": the workers run different builds"));
  }
  ASSIGN_OR_RETURN(auto region, transport::RemoteRegion::Deserialize(descriptor.region()));
  if (descriptor.offset() > region.size ||
      descriptor.capacity() > region.size - descriptor.offset()) {
    return absl::InvalidArgumentError("the reservation lies outside the decode worker's region");
  }
  ASSIGN_OR_RETURN(auto pool_region,
                   transport::RemoteRegion::Deserialize(descriptor.pool_region()));
  if (descriptor.ship_from_rows_size() > 0) {
    // The decode worker holds a prefix of the prompt: only the rows past it travel.
    const std::vector<int64_t> ship_from(descriptor.ship_from_rows().begin(),
                                         descriptor.ship_from_rows().end());
    RETURN_IF_ERROR(layout.ShipFrom(ship_from));
  }
  ASSIGN_OR_RETURN(auto page_tables, CheckPageTables(descriptor, layout, pool_region));
  // Endpoints are cached per decode incarnation and address: a restarted decode worker, or one
  // that fenced its KV connections, gets a new link.
  RETURN_IF_ERROR(agent.Connect(descriptor.incarnation_id(), descriptor.agent_address()));
  // An empty flush completes a new endpoint's wire-up before the prompt is computed (a no-op
  // on one already up). UCX 1.13 aborts the decode process when this worker dies between
  // its wire-up request and the decode side's reply (openucx/ucx#8175 removed the assertion
  // upstream; 1.13 has it): done here, that window is this round trip, not the first layer's puts
  // in the middle of a prefill.
  RETURN_IF_ERROR(agent.Write(descriptor.incarnation_id(), region, {},
                              Clock::now() + kLinkUpTimeout, kLinkUpTimeout));
  StreamTarget target;
  target.peer_id = descriptor.incarnation_id();
  target.region = std::move(region);
  target.offset = descriptor.offset();
  target.pool_region = std::move(pool_region);
  target.page_bytes = static_cast<int64_t>(descriptor.page_bytes());
  target.page_tables = std::move(page_tables);
  target.nonce = descriptor.nonce();
  target.ship_drafter = decode.drafter_state_bytes != 0;
  target.link_digest = transport::LinkDigest(link);
  target.tensor_parallel_size = link.tensor_parallel_size;
  return StateStreamer::Create(&agent, std::move(layout), std::move(target), mode);
}

StatusOr<serving::RequestEvent> StreamPrefill(serving::ServingEngine& engine,
                                              transport::TransferAgent& agent,
                                              std::shared_ptr<StateStreamer> streamer,
                                              serving::RequestSpec spec,
                                              const v1::TransferDescriptor& descriptor,
                                              const TransferOptions& options,
                                              const std::function<bool()>& cancelled) {
  const std::string& peer = descriptor.incarnation_id();
  spec.prefill_only = true;
  spec.state_observer = streamer;
  // The rows ship from their pages: the request keeps those the decode worker keeps.
  spec.keep_rows_from = StateStreamer::KeepRowsFrom(streamer->layout());
  spec.kept_extra_tokens = descriptor.block_rows();
  auto deadline = spec.deadline;
  if (descriptor.lease_deadline_unix_us() > 0) {
    deadline =
        std::min(deadline, serving::DeadlineFromUnixMicros(descriptor.lease_deadline_unix_us()) -
                               kLeaseMargin);
  }
  RETURN_IF_ERROR(
      engine.Submit(spec, [streamer](const serving::RequestEvent& e) { streamer->OnEvent(e); }));

  // While the prompt computes: post each layer's writes as they are queued and watch them.
  transport::ProgressWatch watch(options.stall);
  std::optional<serving::RequestEvent> event;
  while (true) {
    streamer->WaitForWork(std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
    const auto now = Clock::now();
    Status failure = streamer->PostQueued();
    if (failure.ok()) failure = streamer->error();
    if (failure.ok()) failure = streamer->tracker().status();
    if (failure.ok() && watch.Stalled(streamer->tracker(), now)) {
      agent.AbortPeer(peer);
      failure = TransferError(FailureReason::kStall, absl::StatusCode::kDeadlineExceeded,
                              absl::StrCat("KV transfer to decode worker ", peer, " stalled: no ",
                                           "write completed for ", options.stall.count(), " ms"));
    }
    if (failure.ok() && cancelled()) {
      failure = TransferError(FailureReason::kCancelled, absl::StatusCode::kCancelled,
                              "the router cancelled the prefill");
    }
    if (failure.ok() && now >= deadline) {
      failure = TransferError(FailureReason::kDeadline, absl::StatusCode::kDeadlineExceeded,
                              now >= spec.deadline
                                  ? "the request's deadline passed during prefill"
                                  : "the decode worker's reservation lease runs out before the "
                                    "prefill finished (raise the router's --reservation-lease-ms)");
    }
    event = streamer->final_event();
    if (failure.ok() && event) failure = FromEngine(*event);
    if (!failure.ok()) {
      engine.Cancel(spec.id);
      return failure;
    }
    if (event) break;
  }
  // The prompt is done: what is left (kWhole: everything) and the record, then one flush.
  RETURN_IF_ERROR(streamer->error());
  RETURN_IF_ERROR(streamer->PostQueued());
  RETURN_IF_ERROR(agent.PostFlush(peer, streamer->tracker()));
  RETURN_IF_ERROR(transport::AwaitCompletion(
      agent, peer, streamer->tracker(),
      std::min(deadline, streamer->prefill_end() + options.tail_timeout), options.stall));
  return *std::move(event);
}

void Abandon(transport::TransferAgent& agent, const std::string& peer_id,
             std::shared_ptr<StateStreamer> streamer, std::chrono::milliseconds stall) {
  streamer->Stop();
  // Deadline "now": only drain what was posted, bounded by the stall timer.
  transport::AwaitCompletion(agent, peer_id, streamer->tracker(), Clock::now(), stall)
      .IgnoreError();
  if (streamer->tracker().pending() > 0) {
    // The transport may still read the pages: keep them (and the tracker its callbacks
    // complete into) for the life of the process rather than free memory in use.
    LOG_ERROR("KV pages quarantined peer={} pending_writes={}", peer_id,
              streamer->tracker().pending());
    new std::shared_ptr<StateStreamer>(std::move(streamer));
  }
}

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
  auto sampling = serving::FromProto(request->sampling());
  if (!sampling.ok()) return serving::ToGrpcStatus(sampling.status());
  auto streamer = LinkToReservation(*engine_, *agent_, link_, descriptor,
                                    request->prompt_token_ids_size(), options_.mode);
  metrics_->Handshake(streamer.ok() ||
                      transport::ReasonOf(streamer.status()) != transport::FailureReason::kRefused);
  if (!streamer.ok()) {
    metrics_->Failed(streamer.status());
    LOG_WARN("kv link refused request={} decode={} error={}", request->context().request_id(),
             descriptor.incarnation_id(), streamer.status().ToString());
    return Failed(writer, streamer.status());
  }
  writer->Write(Progress(v1::PrefillProgress::STAGE_ADMITTED));
  serving::RequestSpec spec;
  spec.id = serving::EngineRequestId(request->context());
  spec.prompt.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
  spec.sampling = std::move(sampling).value();
  spec.deadline = serving::DeadlineFromUnixMicros(request->context().deadline_unix_us());
  auto first = StreamPrefill(*engine_, *agent_, *streamer, std::move(spec), descriptor, options_,
                             [context] { return context->IsCancelled(); });
  if (!first.ok()) {
    metrics_->Failed(first.status());
    LOG_WARN("kv transfer failed request={} reason={} error={}", request->context().request_id(),
             transport::FailureReasonName(transport::ReasonOf(first.status())),
             first.status().ToString());
    Abandon(*agent_, descriptor.incarnation_id(), std::move(*streamer), options_.stall);
    return Failed(writer, first.status());
  }
  const StateStreamer& done = **streamer;
  const auto now = Clock::now();
  metrics_->Copied(done.bytes_copied());
  metrics_->Sent(done.bytes_posted(),
                 std::chrono::duration<double>(now - done.first_post()).count(),
                 std::chrono::duration<double>(now - done.prefill_end()).count());
  v1::PrefillProgress completed = Progress(v1::PrefillProgress::STAGE_COMPLETED);
  completed.set_first_token_id(static_cast<uint32_t>(first->tokens.front()));
  completed.set_cached_prompt_tokens(static_cast<uint32_t>(first->cached_tokens));
  if (!first->logprobs.empty()) {
    *completed.mutable_first_token_logprob() = serving::ToProto(first->logprobs.front());
  }
  serving::AppendLogprobs(first->prompt_logprobs, completed.mutable_prompt_logprobs());
  completed.set_layers_sent(static_cast<uint32_t>(engine_->model().config().num_hidden_layers));
  writer->Write(completed);
  return grpc::Status::OK;
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
