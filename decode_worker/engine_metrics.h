// Exports a ServingEngine's state as Prometheus metrics (docs/metrics.md, decode worker
// section), sampled on a timer so the engine's hot loop carries no metrics code.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/serving/serving_engine.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdspark::decode {

class EngineMetrics {
 public:
  EngineMetrics(prometheus::Registry& registry, const serving::ServingEngine* engine,
                std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~EngineMetrics();

  // Takes one sample now (also called by the timer).
  void Sample();

 private:
  const serving::ServingEngine* engine_;
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  prometheus::Gauge& cache_bytes_;
  prometheus::Counter& generated_;
  prometheus::Counter& steps_;
  prometheus::Counter& drafts_;
  prometheus::Counter& draft_tokens_;
  prometheus::Counter& accepted_;
  prometheus::Family<prometheus::Counter>& accepted_per_position_;
  prometheus::Histogram& verify_length_;
  int64_t last_generated_ = 0;
  int64_t last_steps_ = 0;
  serving::SpecStats last_spec_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pdspark::decode
