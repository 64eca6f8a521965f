#include "common/metrics/metrics.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"
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

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& bind, std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<MetricsServer> server(new MetricsServer);
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(bind);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics server on ", bind, ": ", e.what()));
  }
  server->exposer_->RegisterCollectable(registry);
  const auto ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError(absl::StrCat("metrics server on ", bind));
  server->port_ = ports.front();
  return server;
}

MetricsServer::~MetricsServer() = default;

}  // namespace pdspark::metrics
