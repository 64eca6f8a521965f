#include "common/metrics/metrics.h"

#include "gtest/gtest.h"

namespace pdspark::metrics {
namespace {

TEST(MetricsTest, BucketsAreIncreasingAndSpanCpuAndGpuSpeeds) {
  const auto latency = LatencyBuckets();
  ASSERT_GE(latency.size(), 10u);
  EXPECT_LE(latency.front(), 0.001);
  EXPECT_GE(latency.back(), 100.0);
  for (size_t i = 1; i < latency.size(); ++i) EXPECT_GT(latency[i], latency[i - 1]);
}

TEST(MetricsTest, SerializesRegisteredCountersAsPrometheusText) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter()
                     .Name("pdspark_test_requests_total")
                     .Help("requests")
                     .Register(registry);
  family.Add({{"status", "ok"}}).Increment(3);
  const std::string text = Serialize(registry);
  EXPECT_NE(text.find("# TYPE pdspark_test_requests_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("pdspark_test_requests_total{status=\"ok\"} 3"), std::string::npos) << text;
}

}  // namespace
}  // namespace pdspark::metrics
