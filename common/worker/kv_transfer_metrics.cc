#include "common/worker/kv_transfer_metrics.h"

#include "common/metrics/metrics.h"
#include "common/transport/transfer_agent.h"

namespace pdspark::worker {

KvTransferMetrics::KvTransferMetrics(prometheus::Registry& registry, const std::string& transport)
    : bytes_(prometheus::BuildCounter()
                 .Name("pdspark_kv_transfer_bytes_total")
                 .Help("KV cache bytes moved between prefill and decode workers")
                 .Register(registry)),
      sent_(bytes_.Add({{"direction", "send"}, {"transport", transport}})),
      received_(bytes_.Add({{"direction", "receive"}, {"transport", transport}})),
      duration_(prometheus::BuildHistogram()
                    .Name("pdspark_kv_transfer_seconds")
                    .Help("first put to remote completion, per request")
                    .Register(registry)
                    .Add({}, metrics::LatencyBuckets())),
      tail_(prometheus::BuildHistogram()
                .Name("pdspark_kv_transfer_tail_seconds")
                .Help("prompt's last layer to remote completion of its state, per request")
                .Register(registry)
                .Add({}, metrics::LatencyBuckets())),
      handoff_(prometheus::BuildHistogram()
                   .Name("pdspark_kv_handoff_seconds")
                   .Help("prompt's last layer on the prefill worker to the state restored on "
                         "the decode worker (wall clocks of both hosts)")
                   .Register(registry)
                   .Add({}, metrics::LatencyBuckets())),
      copied_(prometheus::BuildCounter()
                  .Name("pdspark_kv_copied_bytes_total")
                  .Help("bytes the KV transfer path copied in this process's memory (the DSpark "
                        "ring and the completion record; the rows travel from page to page)")
                  .Register(registry)
                  .Add({})),
      failures_(prometheus::BuildCounter()
                    .Name("pdspark_kv_transfer_failures_total")
                    .Help("failed KV transfers by reason")
                    .Register(registry)),
      stalls_(prometheus::BuildCounter()
                  .Name("pdspark_kv_transfer_stalls_total")
                  .Help("KV transfers failed by the no-progress stall timer")
                  .Register(registry)
                  .Add({})),
      active_reservations_(prometheus::BuildGauge()
                               .Name("pdspark_kv_active_reservations")
                               .Help("decode-side KV reservations outstanding")
                               .Register(registry)
                               .Add({})),
      expired_leases_(prometheus::BuildCounter()
                          .Name("pdspark_kv_expired_leases_total")
                          .Help("reservations freed because the prefill side never delivered")
                          .Register(registry)
                          .Add({})),
      fences_(prometheus::BuildCounter()
                  .Name("pdspark_kv_fences_total")
                  .Help("times the decode worker closed every KV connection so that writes "
                        "posted for untaken reservations cannot land in reused pages")
                  .Register(registry)
                  .Add({})),
      prefix_tokens_(prometheus::BuildCounter()
                         .Name("pdspark_kv_transfer_cached_prompt_tokens_total")
                         .Help("prompt tokens whose KV the decode worker already held (prefix "
                               "cache), so that only the rest of the prompt was transferred")
                         .Register(registry)
                         .Add({})),
      handshakes_(prometheus::BuildCounter()
                      .Name("pdspark_kv_link_handshakes_total")
                      .Help("peer links by outcome")
                      .Register(registry)) {
  prometheus::BuildGauge()
      .Name("pdspark_transport_info")
      .Help("the KV transport in use")
      .Register(registry)
      .Add({{"transport", transport}})
      .Set(1);
  // Every reason and outcome starts at 0, so rate() sees the series before the first event.
  for (const char* reason : {"deadline", "peer_failed", "refused", "invalid"}) {
    failures_.Add({{"reason", reason}});
  }
  for (const char* outcome : {"ok", "refused"}) handshakes_.Add({{"outcome", outcome}});
}

void KvTransferMetrics::Sent(uint64_t bytes, double seconds, double tail_seconds) {
  sent_.Increment(static_cast<double>(bytes));
  duration_.Observe(seconds);
  tail_.Observe(tail_seconds);
}

void KvTransferMetrics::Received(uint64_t bytes, double handoff_seconds) {
  received_.Increment(static_cast<double>(bytes));
  handoff_.Observe(handoff_seconds);
}

void KvTransferMetrics::Failed(const Status& status) {
  const transport::FailureReason reason = transport::ReasonOf(status);
  if (reason == transport::FailureReason::kStall) stalls_.Increment();
  failures_.Add({{"reason", std::string(transport::FailureReasonName(reason))}}).Increment();
}

void KvTransferMetrics::Handshake(bool ok) {
  handshakes_.Add({{"outcome", ok ? "ok" : "refused"}}).Increment();
}

}  // namespace pdspark::worker
