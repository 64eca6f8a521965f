#include "router/router_metrics.h"

#include <map>

#include "common/metrics/metrics.h"

namespace pdspark::router {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

}  // namespace

RouterMetrics::RouterMetrics(std::string model)
    : model_(std::move(model)), registry_(std::make_shared<prometheus::Registry>()) {
  const prometheus::Labels base = {{"model", model_}, {"role", "router"}};
  requests_ = &BuildCounter().Name("pdspark_requests_total").Help("finished requests")
                   .Labels(base).Register(*registry_);
  rejections_ = &BuildCounter().Name("pdspark_rejections_total")
                     .Help("requests refused before reaching a worker").Labels(base)
                     .Register(*registry_);
  decisions_ = &BuildCounter().Name("pdspark_scheduling_decisions_total")
                    .Help("worker choices per stage").Labels(base).Register(*registry_);
  retries_ = &BuildCounter().Name("pdspark_router_retries_total")
                  .Help("re-dispatches after a worker failure").Labels(base).Register(*registry_);
  migrations_ = &BuildCounter().Name("pdspark_router_migrations_total")
                     .Help("streams moved to another decode worker mid-generation")
                     .Labels(base).Register(*registry_).Add({});
  // Here `role` is the worker's role (prefill, decode), so the router's own role label is left off.
  workers_ = &BuildGauge().Name("pdspark_workers").Help("registry view")
                  .Labels({{"model", model_}}).Register(*registry_);
  in_flight_ = &BuildGauge().Name("pdspark_requests_in_flight").Help("admitted, not yet finished")
                    .Labels(base).Register(*registry_).Add({});
  queue_depth_ = &BuildGauge().Name("pdspark_queue_depth").Help("waiting for a worker")
                      .Labels(base).Register(*registry_).Add({});
  auto histogram = [&](const char* name, const char* help) {
    return &BuildHistogram().Name(name).Help(help).Labels(base).Register(*registry_)
                .Add({}, metrics::LatencyBuckets());
  };
  queue_time_ = histogram("pdspark_queue_time_seconds", "admission to dispatch");
  ttft_ = histogram("pdspark_time_to_first_token_seconds", "arrival to first token sent");
  itl_ = histogram("pdspark_inter_token_latency_seconds",
                   "gap between consecutive streamed chunks, per token");
  tpot_ = histogram("pdspark_time_per_output_token_seconds", "(e2e - ttft) / (tokens - 1)");
  e2e_ = histogram("pdspark_e2e_request_latency_seconds", "arrival to last token");
  prompt_tokens_ = &BuildCounter().Name("pdspark_prompt_tokens_total").Help("prompt tokens")
                        .Labels(base).Register(*registry_).Add({});
  generation_tokens_ = &BuildCounter().Name("pdspark_generation_tokens_total")
                            .Help("generated tokens").Labels(base).Register(*registry_).Add({});
  // Known label values start at 0, so rate() sees the series before the first event.
  for (const char* reason :
       {"queue_full", "too_long", "invalid", "no_worker", "unauthenticated", "rate_limited"}) {
    rejections_->Add({{"reason", reason}});
  }
  for (const char* stage : {"prefill", "decode"}) retries_->Add({{"stage", stage}});
}

void RouterMetrics::RequestFinished(std::string_view status, std::string_view finish) {
  requests_->Add({{"status", std::string(status)}, {"finish_reason", std::string(finish)}})
      .Increment();
}

void RouterMetrics::Rejected(std::string_view reason) {
  rejections_->Add({{"reason", std::string(reason)}}).Increment();
}

void RouterMetrics::SchedulingDecision(std::string_view policy, std::string_view stage,
                                       std::string_view outcome) {
  decisions_->Add({{"policy", std::string(policy)}, {"stage", std::string(stage)},
                   {"outcome", std::string(outcome)}})
      .Increment();
}

void RouterMetrics::Migrated() { migrations_->Increment(); }

void RouterMetrics::Retried(std::string_view stage) {
  retries_->Add({{"stage", std::string(stage)}}).Increment();
}

std::string RouterMetrics::Scrape(const WorkerRegistry& registry) {
  std::map<std::pair<std::string, std::string>, double> counts;
  for (const char* role : {"prefill", "decode"}) {
    for (const char* state : {"healthy", "unhealthy", "draining"}) counts[{role, state}] = 0;
  }
  for (const WorkerSnapshot& w : registry.All()) {
    counts[{std::string(WorkerRoleName(w.role)), std::string(WorkerStateName(w.state))}] += 1;
  }
  for (const auto& [key, n] : counts) {
    workers_->Add({{"role", key.first}, {"state", key.second}}).Set(n);
  }
  return metrics::Serialize(*registry_);
}

}  // namespace pdspark::router
