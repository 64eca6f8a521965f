#include "engine_service/engine_metrics.h"

#include <algorithm>

#include "common/metrics/metrics.h"

namespace pdspark::serving {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name,
                         const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}
prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(r).Add({});
}
prometheus::Histogram& Histogram(prometheus::Registry& r, const std::string& name,
                                 const std::string& help, std::vector<double> bounds) {
  return BuildHistogram().Name(name).Help(help).Register(r).Add({}, std::move(bounds));
}

// DSpark verify lengths 0..8 get a bucket each; longer ones land in +Inf.
constexpr int kVerifyLengthBuckets = 8;

void Grow(prometheus::Counter& counter, int64_t now, int64_t before) {
  counter.Increment(static_cast<double>(now - before));
}

int64_t At(const std::vector<int64_t>& v, size_t i) { return i < v.size() ? v[i] : 0; }

}  // namespace

EngineMetrics::EngineMetrics(prometheus::Registry& registry, const ServingEngine* engine,
                             const std::string& role, std::chrono::milliseconds period)
    : engine_(engine),
      decode_(role == "decode"),
      running_(Gauge(registry, "pdspark_" + role + "_running_requests",
                     "requests in the running batch")),
      waiting_(Gauge(registry, "pdspark_" + role + "_waiting_requests",
                     "admitted, waiting for a batch slot or cache")),
      steps_(Counter(registry, "pdspark_" + role + "_steps_total", "engine steps run")),
      step_seconds_(Histogram(registry, "pdspark_" + role + "_step_seconds",
                              "one engine step: drafting, the forward, sampling",
                              metrics::LatencyBuckets())),
      batch_size_(Histogram(registry, "pdspark_" + role + "_batch_size", "sequences per step",
                            metrics::CountBuckets())),
      prefill_seconds_(Histogram(registry, "pdspark_prefill_seconds",
                                 "submission to first token of a prompt computed here",
                                 metrics::LatencyBuckets())),
      prompt_tokens_(
          Counter(registry, "pdspark_prefill_prompt_tokens_total", "prompt tokens computed here")),
      cache_used_(BuildGauge()
                      .Name("pdspark_cache_used_bytes")
                      .Help("bytes of cache held, per cache group")
                      .Register(registry)),
      cache_ratio_(BuildGauge()
                       .Name("pdspark_cache_usage_ratio")
                       .Help("bytes held by the group / the KV pool's size")
                       .Register(registry)),
      cache_capacity_(Gauge(registry, "pdspark_cache_capacity_bytes",
                            "the KV pool's size (--kv-cache-memory-bytes)")),
      cache_high_water_(Gauge(registry, "pdspark_cache_high_water_bytes",
                              "the most bytes of the KV pool held at once since start")),
      kv_bytes_per_token_(Gauge(registry, "pdspark_kv_cache_bytes_per_token",
                                "KV cache bytes per token of context, summed over layers: a "
                                "window row and a compressed entry's share (--kv-cache-dtype)")),
      cache_reserved_(Gauge(registry, "pdspark_cache_reserved_bytes",
                            "worst-case cache of the admitted requests")),
      prefix_query_tokens_(Counter(registry, "pdspark_prefix_cache_queries_total",
                                   "tokens of the requests looked up in the prefix cache")),
      prefix_hit_tokens_(Counter(registry, "pdspark_prefix_cache_hits_total",
                                 "tokens reused from the prefix cache instead of computed")),
      prefix_lookups_(Counter(registry, "pdspark_prefix_cache_lookups_total",
                              "requests looked up in the prefix cache")),
      prefix_lookup_hits_(Counter(registry, "pdspark_prefix_cache_lookup_hits_total",
                                  "requests that reused a cached prefix")),
      prefix_evictions_(Counter(registry, "pdspark_prefix_cache_evictions_total",
                                "cached states dropped to free KV pool pages")),
      prefix_entries_(Gauge(registry, "pdspark_prefix_cache_entries", "cached states held")),
      prefix_bytes_(Gauge(registry, "pdspark_prefix_cache_bytes",
                          "KV pool bytes only the prefix cache holds (reclaimed on demand)")) {
  if (decode_) {
    generated_ = &Counter(registry, "pdspark_generation_tokens_total", "tokens committed");
    drafts_ = &Counter(registry, "pdspark_spec_decode_drafts_total", "DSpark verification rounds");
    draft_tokens_ = &Counter(registry, "pdspark_spec_decode_draft_tokens_total", "tokens proposed");
    accepted_ =
        &Counter(registry, "pdspark_spec_decode_accepted_tokens_total", "proposed tokens accepted");
    accepted_per_position_ = &BuildCounter()
                                  .Name("pdspark_spec_decode_accepted_per_position_total")
                                  .Help("rounds whose draft at this position was accepted")
                                  .Register(registry);
    prometheus::Histogram::BucketBoundaries lengths;
    for (int n = 0; n <= kVerifyLengthBuckets; ++n) lengths.push_back(n);
    verify_length_ = &Histogram(registry, "pdspark_spec_decode_verify_length",
                                "draft tokens verified per round", lengths);
  }
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
  std::lock_guard lock(mu_);  // a concurrent sample must not export the same growth twice
  const ServingStats stats = engine_->Stats();
  running_.Set(static_cast<double>(stats.running));
  waiting_.Set(static_cast<double>(stats.waiting));
  Grow(steps_, stats.steps, last_.steps);
  metrics::ExportGrowth(stats.step_seconds, last_.step_seconds, step_seconds_);
  metrics::ExportGrowth(stats.batch_size, last_.batch_size, batch_size_);
  metrics::ExportGrowth(stats.prefill_seconds, last_.prefill_seconds, prefill_seconds_);
  Grow(prompt_tokens_, stats.prompt_tokens, last_.prompt_tokens);
  SampleCache(stats);
  SamplePrefixCache(stats);
  if (decode_) {
    Grow(*generated_, stats.generated_tokens, last_.generated_tokens);
    SampleSpec(stats.spec);
  }
  last_ = stats;
}

void EngineMetrics::SampleCache(const ServingStats& stats) {
  cache_capacity_.Set(static_cast<double>(stats.cache_capacity_bytes));
  cache_high_water_.Set(static_cast<double>(stats.cache_high_water_bytes));
  kv_bytes_per_token_.Set(stats.kv_bytes_per_token);
  cache_reserved_.Set(static_cast<double>(stats.cache_bytes_reserved));
  for (const auto& [group, bytes] : stats.cache_bytes_by_group) {
    cache_used_.Add({{"group", group}}).Set(static_cast<double>(bytes));
    if (stats.cache_capacity_bytes > 0) {
      cache_ratio_.Add({{"group", group}})
          .Set(static_cast<double>(bytes) / static_cast<double>(stats.cache_capacity_bytes));
    }
  }
}

void EngineMetrics::SamplePrefixCache(const ServingStats& stats) {
  const PrefixCacheStats& now = stats.prefix_cache;
  const PrefixCacheStats& before = last_.prefix_cache;
  Grow(prefix_query_tokens_, now.query_tokens, before.query_tokens);
  Grow(prefix_hit_tokens_, now.hit_tokens, before.hit_tokens);
  Grow(prefix_lookups_, now.queries, before.queries);
  Grow(prefix_lookup_hits_, now.hits, before.hits);
  Grow(prefix_evictions_, now.evicted, before.evicted);
  prefix_entries_.Set(static_cast<double>(now.entries));
  prefix_bytes_.Set(static_cast<double>(stats.prefix_cache_bytes));
}

void EngineMetrics::SampleSpec(const SpecStats& spec) {
  const SpecStats& before = last_.spec;
  Grow(*drafts_, spec.drafts, before.drafts);
  Grow(*draft_tokens_, spec.draft_tokens, before.draft_tokens);
  Grow(*accepted_, spec.accepted_tokens, before.accepted_tokens);
  for (size_t k = 0; k < spec.accepted_per_position.size(); ++k) {
    Grow(accepted_per_position_->Add({{"position", std::to_string(k)}}),
         spec.accepted_per_position[k], At(before.accepted_per_position, k));
  }
  std::vector<double> increments(kVerifyLengthBuckets + 2, 0.0);
  double sum = 0;
  for (size_t n = 0; n < spec.verify_lengths.size(); ++n) {
    const int64_t rounds = spec.verify_lengths[n] - At(before.verify_lengths, n);
    increments[std::min<size_t>(n, kVerifyLengthBuckets + 1)] += static_cast<double>(rounds);
    sum += static_cast<double>(n * rounds);
  }
  if (std::any_of(increments.begin(), increments.end(), [](double x) { return x != 0; })) {
    verify_length_->ObserveMultiple(increments, sum);
  }
}

}  // namespace pdspark::serving
