#include "common/metrics/metrics.h"

#include <algorithm>

#include "prometheus/text_serializer.h"

namespace pdspark::metrics {

std::string Serialize(const prometheus::Registry& registry,
                      const prometheus::Labels& process_labels) {
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  for (prometheus::MetricFamily& family : families) {
    for (prometheus::ClientMetric& metric : family.metric) {
      std::vector<prometheus::ClientMetric::Label> labels;
      for (const auto& [name, value] : process_labels) {
        const bool own = std::any_of(metric.label.begin(), metric.label.end(),
                                     [&](const auto& l) { return l.name == name; });
        if (!own) labels.push_back({name, value});
      }
      labels.insert(labels.end(), metric.label.begin(), metric.label.end());
      metric.label = std::move(labels);
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

void ExportGrowth(const CumulativeHistogram& now, const CumulativeHistogram& before,
                  prometheus::Histogram& out) {
  std::vector<double> increments(now.counts.size(), 0.0);
  bool grew = false;
  for (size_t i = 0; i < now.counts.size(); ++i) {
    const int64_t was = i < before.counts.size() ? before.counts[i] : 0;
    increments[i] = static_cast<double>(now.counts[i] - was);
    grew = grew || increments[i] != 0;
  }
  if (grew) out.ObserveMultiple(increments, now.sum - before.sum);
}

}  // namespace pdspark::metrics
