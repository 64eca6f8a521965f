// Exports a ServingEngine's state as Prometheus metrics (docs/metrics.md, "Engine" and
// "Decode worker"), sampled on a timer so the engine's hot loop carries no metrics code: the
// engine keeps cumulative counts in ServingStats and every sample exports their growth.
// Both workers run one; `role` ("prefill" or "decode") names the per-role series.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "engine/serving/serving_engine.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdspark::serving {

class EngineMetrics {
 public:
  EngineMetrics(prometheus::Registry& registry, const ServingEngine* engine,
                const std::string& role,
                std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~EngineMetrics();

  // Takes one sample now (also called by the timer).
  void Sample();

 private:
  void SampleCache(const ServingStats& stats);
  void SamplePrefixCache(const ServingStats& stats);
  void SampleSpec(const SpecStats& spec);

  const ServingEngine* engine_;
  const bool decode_;
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  prometheus::Counter& steps_;
  prometheus::Histogram& step_seconds_;
  prometheus::Histogram& batch_size_;
  prometheus::Histogram& prefill_seconds_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Family<prometheus::Gauge>& cache_used_;
  prometheus::Family<prometheus::Gauge>& cache_ratio_;
  prometheus::Gauge& cache_capacity_;
  prometheus::Gauge& cache_high_water_;
  prometheus::Gauge& kv_bytes_per_token_;
  prometheus::Gauge& cache_reserved_;
  prometheus::Counter& prefix_query_tokens_;
  prometheus::Counter& prefix_hit_tokens_;
  prometheus::Counter& prefix_lookups_;
  prometheus::Counter& prefix_lookup_hits_;
  prometheus::Counter& prefix_evictions_;
  prometheus::Gauge& prefix_entries_;
  prometheus::Gauge& prefix_bytes_;
  // Decode only (nullptr on a prefill worker).
  prometheus::Counter* generated_ = nullptr;
  prometheus::Counter* drafts_ = nullptr;
  prometheus::Counter* draft_tokens_ = nullptr;
  prometheus::Counter* accepted_ = nullptr;
  prometheus::Family<prometheus::Counter>* accepted_per_position_ = nullptr;
  prometheus::Histogram* verify_length_ = nullptr;

  std::mutex mu_;  // Sample() may run on the timer and on a caller at once
  ServingStats last_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pdspark::serving
