#include "common/metrics/metrics.h"

#include "prometheus/text_serializer.h"

namespace pdspark::metrics {
namespace {

std::vector<double> Geometric(double first, double factor, int count) {
  std::vector<double> buckets;
  double value = first;
  for (int i = 0; i < count; ++i, value *= factor) buckets.push_back(value);
  return buckets;
}

}  // namespace

std::vector<double> LatencyBuckets() { return Geometric(0.001, 2.0, 18); }
std::vector<double> CountBuckets() { return Geometric(1.0, 2.0, 16); }

std::string Serialize(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace pdspark::metrics
