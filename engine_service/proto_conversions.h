// Conversions between the wire types of proto/pdspark/v1 and the engine's own types, in one
// place so both workers map fields the same way.
#pragma once

#include <chrono>
#include <vector>

#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampling_params.h"
#include "engine/serving/request.h"
#include "engine/serving/serving_engine.h"
#include "grpcpp/support/status.h"
#include "pdspark/v1/common.pb.h"
#include "pdspark/v1/registry.pb.h"

namespace pdspark::serving {

// InvalidArgument for a structured-output constraint that does not compile.
StatusOr<sampling::SamplingParams> FromProto(const v1::SamplingParams& proto);
v1::FinishReason ToProto(sampling::FinishReason reason, Outcome outcome);
v1::SpecCounters ToProto(const SpecStats& stats);
v1::TokenLogprob ToProto(const sampling::TokenLogprob& logprob);
void AppendLogprobs(const std::vector<sampling::TokenLogprob>& logprobs,
                    google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out);

// The request's absolute deadline (Unix microseconds, 0 = none) on the steady clock.
Clock::time_point DeadlineFromUnixMicros(int64_t unix_us);

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// What a worker reports in its heartbeats.
v1::WorkerLoad ToWorkerLoad(const ServingStats& stats);
// The load a worker heartbeats: ToWorkerLoad, and the prefix cache's entries for kv_aware.
v1::WorkerLoad WorkerLoadOf(const ServingEngine& engine);

// The engine's id for one attempt of a request: a retry reuses the router's request id.
std::string EngineRequestId(const v1::RequestContext& context);
// Cancels every attempt of `request_id` still in the engine (the router cancels by id).
bool CancelAllAttempts(ServingEngine& engine, const std::string& request_id);

}  // namespace pdspark::serving
