// The small HTTP side of a worker, on --metrics-port: GET /metrics (Prometheus text),
// GET /live (the process is up) and GET /ready (200 only when `ready()` says so: registered
// with a router and transport validated). Kubernetes probes and Prometheus use it. Every
// sample carries `process_labels` (model, role, worker).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/base/status.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}

namespace pdspark::worker {

class WorkerHttpServer {
 public:
  static StatusOr<std::unique_ptr<WorkerHttpServer>> Start(
      const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
      prometheus::Labels process_labels, std::function<bool()> ready);
  ~WorkerHttpServer();
  int port() const { return port_; }

 private:
  WorkerHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace pdspark::worker
