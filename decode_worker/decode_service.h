// The decode worker's gRPC service: runs requests on the ServingEngine (continuous batching)
// and streams each request's committed tokens back to the router.
#pragma once

#include <memory>

#include "decode_worker/kv_receiver.h"
#include "engine/serving/serving_engine.h"
#include "pdspark/v1/worker.grpc.pb.h"

namespace pdspark::decode {

class DecodeService final : public v1::DecodeWorker::Service {
 public:
  // `receiver` may be null: then only colocated requests (no reservation) are served.
  DecodeService(serving::ServingEngine* engine, KvReceiver* receiver)
      : engine_(engine), receiver_(receiver) {}

  grpc::Status Reserve(grpc::ServerContext* context, const v1::ReserveRequest* request,
                       v1::ReserveResponse* response) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override;

  grpc::Status Generate(grpc::ServerContext* context, const v1::WorkerGenerateRequest* request,
                        grpc::ServerWriter<v1::WorkerGenerateResponse>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* context, const v1::CancelRequest* request,
                      v1::CancelResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  serving::ServingEngine* engine_;
  KvReceiver* receiver_;
};

}  // namespace pdspark::decode
