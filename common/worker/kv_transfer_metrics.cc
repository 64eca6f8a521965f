#include "common/worker/kv_transfer_metrics.h"

#include "common/metrics/metrics.h"

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
      failures_(prometheus::BuildCounter()
                    .Name("pdspark_kv_transfer_failures_total")
                    .Help("failed KV transfers by reason")
                    .Register(registry)),
      stalls_(prometheus::BuildCounter()
                  .Name("pdspark_kv_transfer_stalls_total")
                  .Help("KV writes that hit their deadline")
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

void KvTransferMetrics::Sent(uint64_t bytes, double seconds) {
  sent_.Increment(static_cast<double>(bytes));
  duration_.Observe(seconds);
}

void KvTransferMetrics::Received(uint64_t bytes) {
  received_.Increment(static_cast<double>(bytes));
}

void KvTransferMetrics::Failed(const Status& status) {
  const char* reason = "invalid";
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      reason = "deadline";
      stalls_.Increment();
      break;
    case absl::StatusCode::kUnavailable:
      reason = "peer_failed";
      break;
    case absl::StatusCode::kFailedPrecondition:
      reason = "refused";
      break;
    default:
      break;
  }
  failures_.Add({{"reason", reason}}).Increment();
}

void KvTransferMetrics::Handshake(bool ok) {
  handshakes_.Add({{"outcome", ok ? "ok" : "refused"}}).Increment();
}

}  // namespace pdspark::worker
