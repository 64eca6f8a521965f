// The decode worker's gRPC service: runs requests on the ServingEngine (continuous batching)
// and streams each request's committed tokens back to the router. Generate is on gRPC's
// callback API (decode_worker/generate_stream.h: no thread per stream); the short calls are
// synchronous.
#pragma once

#include <memory>

#include "decode_worker/generate_stream.h"
#include "decode_worker/kv_receiver.h"
#include "engine/serving/serving_engine.h"
#include "pdspark/v1/worker.grpc.pb.h"

namespace pdspark::decode {

class DecodeService final
    : public v1::DecodeWorker::WithCallbackMethod_Generate<v1::DecodeWorker::Service> {
 public:
  // `receiver` may be null: then only colocated requests (no reservation) are served. The
  // service must outlive the server's Shutdown (its pump ends the streams).
  DecodeService(serving::ServingEngine* engine, KvReceiver* receiver)
      : engine_(engine), receiver_(receiver), pump_(engine) {}

  grpc::Status Reserve(grpc::ServerContext* context, const v1::ReserveRequest* request,
                       v1::ReserveResponse* response) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override;

  grpc::ServerWriteReactor<v1::WorkerGenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::WorkerGenerateRequest* request) override;
  grpc::Status Cancel(grpc::ServerContext* context, const v1::CancelRequest* request,
                      v1::CancelResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  // The engine request for a Generate call (its delivered state taken from the reservation).
  StatusOr<serving::RequestSpec> SpecFor(const grpc::CallbackServerContext& context,
                                         const v1::WorkerGenerateRequest& request);

  serving::ServingEngine* engine_;
  KvReceiver* receiver_;
  StreamPump pump_;
};

}  // namespace pdspark::decode
