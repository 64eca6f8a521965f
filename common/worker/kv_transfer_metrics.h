// The KV-transfer metrics of docs/metrics.md, shared by the prefill (send) and decode
// (receive) sides.
#pragma once

#include <string>

#include "common/base/status.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pdspark::worker {

class KvTransferMetrics {
 public:
  KvTransferMetrics(prometheus::Registry& registry, const std::string& transport);

  void Sent(uint64_t bytes, double seconds);
  void Received(uint64_t bytes);
  // Counts a failed transfer under a reason derived from its status.
  void Failed(const Status& status);
  void Handshake(bool ok);
  void LeaseExpired() { expired_leases_.Increment(); }
  void SetActiveReservations(int64_t n) { active_reservations_.Set(static_cast<double>(n)); }

 private:
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Counter& sent_;
  prometheus::Counter& received_;
  prometheus::Histogram& duration_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Counter& stalls_;
  prometheus::Gauge& active_reservations_;
  prometheus::Counter& expired_leases_;
  prometheus::Family<prometheus::Counter>& handshakes_;
};

}  // namespace pdspark::worker
