#include "decode_worker/engine_metrics.h"

namespace pdspark::decode {
namespace {

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}
prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

EngineMetrics::EngineMetrics(prometheus::Registry& registry, const serving::ServingEngine* engine,
                             std::chrono::milliseconds period)
    : engine_(engine),
      running_(Gauge(registry, "pdspark_decode_running_requests", "requests in the running batch")),
      waiting_(Gauge(registry, "pdspark_decode_waiting_requests", "admitted, not yet running")),
      cache_bytes_(Gauge(registry, "pdspark_cache_used_bytes", "bytes of paged cache in use")),
      generated_(Counter(registry, "pdspark_generation_tokens_total", "tokens committed")),
      steps_(Counter(registry, "pdspark_decode_steps_total", "engine steps run")) {
  thread_ = std::thread([this, period] {
    std::unique_lock lock(mu_);
    while (!stop_cv_.wait_for(lock, period, [&] { return stop_; })) {
      lock.unlock();
      Sample();
      lock.lock();
    }
  });
}

EngineMetrics::~EngineMetrics() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void EngineMetrics::Sample() {
  const serving::ServingStats stats = engine_->Stats();
  running_.Set(static_cast<double>(stats.running));
  waiting_.Set(static_cast<double>(stats.waiting));
  cache_bytes_.Set(static_cast<double>(stats.cache_bytes_in_use));
  std::lock_guard lock(mu_);  // Sample() may run on the timer and on a caller at once
  generated_.Increment(static_cast<double>(stats.generated_tokens - last_generated_));
  steps_.Increment(static_cast<double>(stats.steps - last_steps_));
  last_generated_ = stats.generated_tokens;
  last_steps_ = stats.steps;
}

}  // namespace pdspark::decode
