// What every worker process does around its gRPC services: listen, register with the routers
// and heartbeat, serve /metrics, /live and /ready, and on SIGTERM (or WorkerAdmin.Drain) drain
// in order: deregister so routers send no new work, wait until `idle()` (no request running or
// queued, no lease outstanding) and the calls in flight end, up to --drain-timeout-s, exit 0.
// docs/reliability.md "Drain".
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
// `idle` defaults to "load() shows nothing running or queued". Returns the process exit code.
int ServeUntilSignal(const WorkerFlags& flags, const WorkerIdentity& identity,
                     const std::vector<grpc::Service*>& services,
                     std::function<v1::WorkerLoad()> load,
                     std::shared_ptr<prometheus::Registry> metrics, const sigset_t& signals,
                     std::function<bool()> idle = {});

}  // namespace pdspark::worker
