// Prometheus metrics for every pdspark process: one registry per process, served as text on
// /metrics by the process's HTTP server (the router's API port, a worker's --metrics-port).
// Names use the `pdspark_` prefix, seconds for times, and few labels (model, role, worker).
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdspark::metrics {

// Latency buckets from 1 ms to ~160 s (x2 steps): fine enough for GPU decode steps and wide
// enough for a CPU prefill of a long prompt.
std::vector<double> LatencyBuckets();
// Token-count buckets 1 .. 32768 (x2 steps).
std::vector<double> CountBuckets();

// The text exposition format of everything in `registry` (for an existing HTTP handler).
std::string Serialize(const prometheus::Registry& registry);

}  // namespace pdspark::metrics
