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
      steps_(Counter(registry, "pdspark_decode_steps_total", "engine steps run")),
      drafts_(Counter(registry, "pdspark_spec_decode_drafts_total", "DSpark verification rounds")),
      draft_tokens_(Counter(registry, "pdspark_spec_decode_draft_tokens_total", "tokens proposed")),
      accepted_(Counter(registry, "pdspark_spec_decode_accepted_tokens_total",
                        "proposed tokens accepted")),
      accepted_per_position_(prometheus::BuildCounter()
                                 .Name("pdspark_spec_decode_accepted_per_position_total")
                                 .Help("rounds whose draft at this position was accepted")
                                 .Register(registry)),
      verify_length_(prometheus::BuildHistogram()
                         .Name("pdspark_spec_decode_verify_length")
                         .Help("draft tokens verified per round")
                         .Register(registry)
                         .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 3, 4, 5, 6, 7, 8})) {
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
  const serving::SpecStats& spec = stats.spec;
  drafts_.Increment(static_cast<double>(spec.drafts - last_spec_.drafts));
  draft_tokens_.Increment(static_cast<double>(spec.draft_tokens - last_spec_.draft_tokens));
  accepted_.Increment(static_cast<double>(spec.accepted_tokens - last_spec_.accepted_tokens));
  for (size_t k = 0; k < spec.accepted_per_position.size(); ++k) {
    const int64_t before =
        k < last_spec_.accepted_per_position.size() ? last_spec_.accepted_per_position[k] : 0;
    accepted_per_position_.Add({{"position", std::to_string(k)}})
        .Increment(static_cast<double>(spec.accepted_per_position[k] - before));
  }
  for (size_t n = 0; n < spec.verify_lengths.size(); ++n) {
    const int64_t before = n < last_spec_.verify_lengths.size() ? last_spec_.verify_lengths[n] : 0;
    for (int64_t i = before; i < spec.verify_lengths[n]; ++i) verify_length_.Observe(double(n));
  }
  last_spec_ = spec;
}

}  // namespace pdspark::decode
