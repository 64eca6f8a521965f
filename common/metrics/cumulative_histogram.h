// A histogram kept as plain cumulative counts, for code that must not depend on Prometheus:
// the serving engine records every step in its stats, and a worker's metrics sampler exports
// the growth since its previous sample (metrics::ExportGrowth in metrics.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pdspark::metrics {

// `count` bucket upper bounds: first, first * factor, first * factor^2, ...
inline std::vector<double> GeometricBuckets(double first, double factor, int count) {
  std::vector<double> bounds;
  double value = first;
  for (int i = 0; i < count; ++i, value *= factor) bounds.push_back(value);
  return bounds;
}

// Latency buckets from 1 ms to ~131 s (x2 steps): fine enough for GPU decode steps and wide
// enough for a CPU prefill of a long prompt.
inline std::vector<double> LatencyBuckets() { return GeometricBuckets(0.001, 2.0, 18); }
// Count buckets 1 .. 32768 (x2 steps): tokens per request, sequences per step.
inline std::vector<double> CountBuckets() { return GeometricBuckets(1.0, 2.0, 16); }

struct CumulativeHistogram {
  explicit CumulativeHistogram(std::vector<double> upper_bounds = {})
      : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

  // Prometheus' `le` semantics: a value equal to a bound counts in that bound's bucket.
  void Observe(double value) {
    ++counts[std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin()];
    sum += value;
  }
  int64_t count() const {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    return total;
  }

  std::vector<double> bounds;   // ascending upper bounds
  std::vector<int64_t> counts;  // per bucket (not cumulative over buckets); the last is +Inf
  double sum = 0;
};

}  // namespace pdspark::metrics
