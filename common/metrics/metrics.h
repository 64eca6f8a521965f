// Prometheus metrics for every pdspark process: one registry per process, served on /metrics
// either by its own Exposer (workers) or by an existing HTTP server (the router's API port).
// Names use the `pdspark_` prefix, seconds for times, and few labels (model, role, worker).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace pdspark::metrics {

// Latency buckets from 1 ms to ~160 s (x2 steps): fine enough for GPU decode steps and wide
// enough for a CPU prefill of a long prompt.
std::vector<double> LatencyBuckets();
// Token-count buckets 1 .. 32768 (x2 steps).
std::vector<double> CountBuckets();

// The text exposition format of everything in `registry` (for an existing HTTP handler).
std::string Serialize(const prometheus::Registry& registry);

// Serves `registry` on http://<bind>/metrics with prometheus-cpp's own server.
class MetricsServer {
 public:
  // `bind` like "127.0.0.1:0" (0 picks a free port).
  static StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& bind, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace pdspark::metrics
