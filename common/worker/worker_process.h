// What every worker process does around its gRPC services: listen, register with the routers
// and heartbeat, serve /metrics, /live and /ready, and on SIGTERM drain in order (deregister,
// let in-flight calls finish up to the drain timeout, exit 0).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/worker/worker_flags.h"
#include "grpcpp/grpcpp.h"
#include "pdspark/v1/registry.pb.h"
#include "prometheus/registry.h"

namespace pdspark::worker {

struct WorkerIdentity {
  v1::WorkerRole role = v1::WORKER_ROLE_UNSPECIFIED;
  std::string incarnation_id;
  std::string config_fingerprint;
  int64_t max_model_len = 0;
};

// Blocks until SIGINT/SIGTERM (blocked in every thread by `signals`), then drains.
// Returns the process exit code.
int ServeUntilSignal(const WorkerFlags& flags, const WorkerIdentity& identity,
                     const std::vector<grpc::Service*>& services,
                     std::function<v1::WorkerLoad()> load,
                     std::shared_ptr<prometheus::Registry> metrics, const sigset_t& signals);

}  // namespace pdspark::worker
