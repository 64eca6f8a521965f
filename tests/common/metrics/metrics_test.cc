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

TEST(MetricsTest, ProcessLabelsGoOnEverySampleUnlessItHasItsOwn) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildGauge().Name("pdspark_test_workers").Help("w").Register(registry);
  family.Add({{"role", "decode"}}).Set(2);
  family.Add({{"state", "healthy"}}).Set(1);
  const std::string text = Serialize(registry, {{"model", "m"}, {"role", "router"}});
  EXPECT_NE(text.find("pdspark_test_workers{model=\"m\",role=\"decode\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("pdspark_test_workers{model=\"m\",role=\"router\",state=\"healthy\"} 1"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, CumulativeHistogramUsesPrometheusBucketBounds) {
  CumulativeHistogram h({1.0, 2.0, 4.0});
  for (double v : {0.5, 1.0, 1.5, 4.0, 9.0}) h.Observe(v);
  EXPECT_EQ(h.counts, (std::vector<int64_t>{2, 1, 1, 1}));  // le=1 includes 1.0; 9 is +Inf
  EXPECT_EQ(h.count(), 5);
  EXPECT_DOUBLE_EQ(h.sum, 16.0);
}

TEST(MetricsTest, ExportGrowthAddsOnlyWhatWasObservedSinceTheLastSample) {
  prometheus::Registry registry;
  auto& out = prometheus::BuildHistogram()
                  .Name("pdspark_test_seconds")
                  .Help("t")
                  .Register(registry)
                  .Add({}, prometheus::Histogram::BucketBoundaries{1.0, 2.0});
  CumulativeHistogram before({1.0, 2.0});
  before.Observe(0.5);
  CumulativeHistogram now = before;
  now.Observe(1.5);
  now.Observe(3.0);
  ExportGrowth(now, before, out);
  ExportGrowth(now, now, out);  // nothing new: no change
  const auto metric = out.Collect().histogram;
  EXPECT_EQ(metric.sample_count, 2u);
  EXPECT_DOUBLE_EQ(metric.sample_sum, 4.5);
  ASSERT_EQ(metric.bucket.size(), 3u);
  EXPECT_EQ(metric.bucket[0].cumulative_count, 0u);
  EXPECT_EQ(metric.bucket[1].cumulative_count, 1u);
  EXPECT_EQ(metric.bucket[2].cumulative_count, 2u);
}

}  // namespace
}  // namespace pdspark::metrics
