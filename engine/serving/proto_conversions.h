// Conversions between the wire types of proto/pdspark/v1 and the engine's own types, in one
// place so both workers map fields the same way.
#pragma once

#include <chrono>

#include "engine/sampling/sampling_params.h"
#include "engine/serving/request.h"
#include "grpcpp/support/status.h"
#include "pdspark/v1/common.pb.h"

namespace pdspark::serving {

sampling::SamplingParams FromProto(const v1::SamplingParams& proto);
v1::FinishReason ToProto(sampling::FinishReason reason, Outcome outcome);
v1::SpecCounters ToProto(const SpecStats& stats);

// The request's absolute deadline (Unix microseconds, 0 = none) on the steady clock.
Clock::time_point DeadlineFromUnixMicros(int64_t unix_us);

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace pdspark::serving
