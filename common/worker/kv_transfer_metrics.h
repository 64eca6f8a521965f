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

  // Prefill side, per delivered request: bytes, first put to remote completion, and the part
  // of it after the prompt's last layer (what layer-wise streaming leaves on the critical path).
  void Sent(uint64_t bytes, double seconds, double tail_seconds);
  // Decode side, per admitted request: bytes, and prefill end to restored state.
  void Received(uint64_t bytes, double handoff_seconds);
  // Counts a failed transfer under its transport::FailureReason.
  void Failed(const Status& status);
  // Bytes a transfer copied in local memory (serialising, restoring), the network put aside.
  void Copied(uint64_t bytes) { copied_.Increment(static_cast<double>(bytes)); }
  void Handshake(bool ok);
  void LeaseExpired() { expired_leases_.Increment(); }
  // The decode side closed every prefill worker's connection before reusing an untaken
  // reservation's pages (decode::KvReceiver).
  void Fenced() { fences_.Increment(); }
  void SetActiveReservations(int64_t n) { active_reservations_.Set(static_cast<double>(n)); }
  // Decode side, per admitted request: prompt tokens whose rows this worker already held (a
  // prefix in its prefix cache), so only the rest travelled.
  void ReusedPrefix(int64_t tokens) { prefix_tokens_.Increment(static_cast<double>(tokens)); }

 private:
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Counter& sent_;
  prometheus::Counter& received_;
  prometheus::Histogram& duration_;
  prometheus::Histogram& tail_;
  prometheus::Histogram& handoff_;
  prometheus::Counter& copied_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Counter& stalls_;
  prometheus::Gauge& active_reservations_;
  prometheus::Counter& expired_leases_;
  prometheus::Counter& fences_;
  prometheus::Counter& prefix_tokens_;
  prometheus::Family<prometheus::Counter>& handshakes_;
};

}  // namespace pdspark::worker
