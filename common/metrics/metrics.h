// Prometheus metrics for every pdspark process: one registry per process, served as text on
// /metrics by the process's HTTP server (the router's API port, a worker's --metrics-port).
// Names use the `pdspark_` prefix, seconds for times, and few labels (model, role, worker).
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/metrics/cumulative_histogram.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdspark::metrics {

// The text exposition format of everything in `registry` (for an existing HTTP handler).
// `process_labels` (e.g. model, role, worker) are added to every sample that does not carry a
// label of the same name, so the code that registers a metric need not know whose it is.
std::string Serialize(const prometheus::Registry& registry,
                      const prometheus::Labels& process_labels = {});

// Adds what `now` counted since `before` to `out` (created with the same bounds).
void ExportGrowth(const CumulativeHistogram& now, const CumulativeHistogram& before,
                  prometheus::Histogram& out);

}  // namespace pdspark::metrics
