// The router's Prometheus metrics (docs/metrics.md, "Router"), served on the HTTP API port.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "router/worker_registry.h"

namespace pdspark::router {

class RouterMetrics {
 public:
  explicit RouterMetrics(std::string model);

  // status: ok, invalid, rejected, error, cancelled, timeout; finish: stop, length, abort,
  // error (empty when the request never reached a worker).
  void RequestFinished(std::string_view status, std::string_view finish);
  // reason: queue_full, too_long, invalid, no_worker.
  void Rejected(std::string_view reason);
  // stage: prefill, decode; outcome: chosen, no_worker.
  void SchedulingDecision(std::string_view policy, std::string_view stage,
                          std::string_view outcome);
  // stage: prefill, decode (before any token reached the client).
  void Retried(std::string_view stage);
  // A stream moved to another decode worker after tokens reached the client.
  void Migrated();

  prometheus::Gauge& in_flight() { return *in_flight_; }
  prometheus::Gauge& queue_depth() { return *queue_depth_; }
  prometheus::Histogram& queue_time() { return *queue_time_; }
  prometheus::Histogram& ttft() { return *ttft_; }
  prometheus::Histogram& itl() { return *itl_; }
  prometheus::Histogram& tpot() { return *tpot_; }
  prometheus::Histogram& e2e() { return *e2e_; }
  prometheus::Counter& prompt_tokens() { return *prompt_tokens_; }
  prometheus::Counter& generation_tokens() { return *generation_tokens_; }

  // The exposition text, with `pdspark_workers` refreshed from `registry` first.
  std::string Scrape(const WorkerRegistry& registry);

 private:
  std::string model_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* rejections_;
  prometheus::Family<prometheus::Counter>* decisions_;
  prometheus::Family<prometheus::Counter>* retries_;
  prometheus::Counter* migrations_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* queue_depth_;
  prometheus::Histogram* queue_time_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* tpot_;
  prometheus::Histogram* e2e_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
};

}  // namespace pdspark::router
