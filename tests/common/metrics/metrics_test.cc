#include "common/metrics/metrics.h"

#include <httplib.h>

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

TEST(MetricsTest, ServerExposesRegisteredCountersOverHttp) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter()
                     .Name("pdspark_test_requests_total")
                     .Help("requests")
                     .Register(*registry);
  family.Add({{"status", "ok"}}).Increment(3);
  auto server = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_NE(response->body.find("pdspark_test_requests_total{status=\"ok\"} 3"), std::string::npos)
      << response->body;
  EXPECT_EQ(Serialize(*registry).find("pdspark_test_requests_total{status=\"ok\"} 3") ==
                std::string::npos,
            false);
}

}  // namespace
}  // namespace pdspark::metrics
