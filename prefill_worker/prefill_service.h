// The prefill worker's gRPC service: prefills a prompt on its ServingEngine (batched with other
// prefills), samples the first token, and writes the sequence state into the memory the decode
// worker reserved, over the transfer agent, before it reports the request complete.
#pragma once

#include <chrono>
#include <string>

#include "common/transport/transfer_agent.h"
#include "common/worker/kv_transfer_metrics.h"
#include "engine/serving/serving_engine.h"
#include "pdspark/v1/worker.grpc.pb.h"

namespace pdspark::prefill {

class PrefillService final : public v1::PrefillWorker::Service {
 public:
  PrefillService(serving::ServingEngine* engine, transport::TransferAgent* agent,
                 std::string config_fingerprint, std::chrono::milliseconds transfer_timeout,
                 worker::KvTransferMetrics* metrics)
      : engine_(engine),
        agent_(agent),
        fingerprint_(std::move(config_fingerprint)),
        transfer_timeout_(transfer_timeout),
        metrics_(metrics) {}

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::PrefillProgress>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* context, const v1::CancelRequest* request,
                      v1::CancelResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  // Runs the prompt on the engine; returns the final event (state + first token).
  StatusOr<serving::RequestEvent> RunPrefill(grpc::ServerContext* context,
                                             const v1::PrefillRequest& request);
  Status Deliver(const v1::PrefillRequest& request, const std::string& state,
                 serving::Clock::time_point deadline);

  serving::ServingEngine* engine_;
  transport::TransferAgent* agent_;
  std::string fingerprint_;
  std::chrono::milliseconds transfer_timeout_;
  worker::KvTransferMetrics* metrics_;
};

}  // namespace pdspark::prefill
