// The prefill worker's gRPC service: checks the link to the decode worker (model, cache
// manifest, TP sizes, drafter), prefills the prompt on its ServingEngine (batched with other
// prefills) while streaming each layer's state into the memory the decode worker reserved,
// and reports the request complete only once the state and its completion record are
// visible there. Deadlines: the request's, the reservation lease, a tail timeout after the
// prompt's last layer, and a no-progress stall timer; any failure cancels the prefill, lets
// posted writes drain (or aborts the link), frees the send buffer and reports STAGE_FAILED
// with the cause.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/transport/link_check.h"
#include "common/transport/transfer_agent.h"
#include "common/worker/kv_transfer_metrics.h"
#include "engine/serving/serving_engine.h"
#include "pdspark/v1/transfer.pb.h"
#include "pdspark/v1/worker.grpc.pb.h"
#include "prefill_worker/state_streamer.h"

namespace pdspark::prefill {

struct TransferOptions {
  StreamMode mode = StreamMode::kLayerwise;
  // After the prompt's last layer the rest of the transfer must finish within this.
  std::chrono::milliseconds tail_timeout{30000};
  // Fail when no write completes for this long while some are outstanding.
  std::chrono::milliseconds stall{5000};
};

// The link checks for a decode worker's transfer descriptor (CheckLink, the prompt the
// reservation was laid out for, the layout's size) and a streamer for its reservation, after
// connecting the agent to the decode worker's incarnation.
StatusOr<std::shared_ptr<StateStreamer>> LinkToReservation(serving::ServingEngine& engine,
                                                           transport::TransferAgent& agent,
                                                           const transport::LinkInfo& link,
                                                           const v1::TransferDescriptor& descriptor,
                                                           int64_t prompt_tokens, StreamMode mode);

// Runs `spec` as a prefill_only request on `engine` while `streamer` ships its state, posting
// each layer's writes as they are queued; then posts the rest, the completion record and a
// flush, and waits for it. Returns the request's final event: the first token (with its logprobs
// and the prompt's when asked for). `cancelled` is polled (the client went
// away); on failure the prefill is cancelled and the caller must Abandon the streamer.
StatusOr<serving::RequestEvent> StreamPrefill(serving::ServingEngine& engine,
                                              transport::TransferAgent& agent,
                                              std::shared_ptr<StateStreamer> streamer,
                                              serving::RequestSpec spec,
                                              const v1::TransferDescriptor& descriptor,
                                              const TransferOptions& options,
                                              const std::function<bool()>& cancelled);

// After a failure: no more writes, the posted ones drain (bounded by the stall timer), and the
// pages they read are freed unless the transport still holds them.
void Abandon(transport::TransferAgent& agent, const std::string& peer_id,
             std::shared_ptr<StateStreamer> streamer, std::chrono::milliseconds stall);

class PrefillService final : public v1::PrefillWorker::Service {
 public:
  PrefillService(serving::ServingEngine* engine, transport::TransferAgent* agent,
                 transport::LinkInfo link, TransferOptions options,
                 worker::KvTransferMetrics* metrics)
      : engine_(engine),
        agent_(agent),
        link_(std::move(link)),
        options_(options),
        metrics_(metrics) {}

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::PrefillProgress>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* context, const v1::CancelRequest* request,
                      v1::CancelResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  serving::ServingEngine* engine_;
  transport::TransferAgent* agent_;
  transport::LinkInfo link_;
  TransferOptions options_;
  worker::KvTransferMetrics* metrics_;
};

}  // namespace pdspark::prefill
