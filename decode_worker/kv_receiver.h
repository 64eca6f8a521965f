// The decode side of a KV transfer: a staging arena registered once with the transfer agent,
// reservations laid out for their prompt (engine/cache/staging_layout.h) with a lease, and the
// hand-over of a delivered state. A request is admitted only when its completion record is
// there, meant for this reservation (nonce), written by a matching sender (link digest), and
// every segment matches its checksum; the state is then restored straight from the arena
// into cache pages, on the caller's (gRPC) thread rather than the engine's. A reservation also
// leases the request's worst-case KV pool bytes from the engine (ReceiverOptions::lease_cache),
// so the restore always finds its pages and the request is admitted on that lease. A
// reservation the prefill side never fills expires; its staging memory and lease return.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "common/base/status.h"
#include "common/transport/link_check.h"
#include "common/transport/registered_arena.h"
#include "common/transport/transfer_agent.h"
#include "common/worker/kv_transfer_metrics.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/request.h"
#include "pdspark/v1/transfer.pb.h"
#include "pdspark/v1/worker.pb.h"

namespace pdspark::decode {

struct ReservationStats {
  int64_t active = 0;
  int64_t expired_total = 0;
  uint64_t bytes_reserved = 0;
};

struct ReceiverOptions {
  uint64_t arena_bytes = 256ull << 20;
  std::string incarnation_id;
  transport::LinkInfo link;  // this worker's side of the handshake
  int64_t block_rows = 256;  // this worker's cache block rows
  const engine::CacheLayout* cache_layout = nullptr;
  // The engine's KV pool lease for a reservation (ServingEngine::ReserveCache); unset: none.
  std::function<StatusOr<serving::CacheLease>(const v1::ReserveRequest&)> lease_cache;
};

class KvReceiver {
 public:
  using Clock = std::chrono::steady_clock;

  static StatusOr<std::unique_ptr<KvReceiver>> Create(transport::TransferAgent* agent,
                                                      ReceiverOptions options,
                                                      worker::KvTransferMetrics* metrics);

  StatusOr<v1::ReserveResponse> Reserve(const v1::ReserveRequest& request);
  bool Release(const std::string& reservation_id);
  // Checks what was delivered into the reservation and restores it into `sequence` (and into
  // `drafter`, which is non-null when this worker speculates and so needs the DSpark context
  // ring). The reservation is gone afterwards, whether or not the delivery was good.
  StatusOr<std::shared_ptr<serving::PrefilledState>> Take(
      const std::string& reservation_id, std::unique_ptr<engine::SequenceState> sequence,
      std::unique_ptr<dspark::DrafterState> drafter);
  ReservationStats Stats();

 private:
  struct Reservation {
    uint64_t offset = 0;
    Clock::time_point expires;
    uint64_t nonce = 0;
    engine::StagingLayout layout;
    serving::CacheLease lease;
  };
  KvReceiver() = default;
  void ExpireLocked(Clock::time_point now);
  StatusOr<std::shared_ptr<serving::PrefilledState>> Restore(
      const Reservation& reservation, std::unique_ptr<engine::SequenceState> sequence,
      std::unique_ptr<dspark::DrafterState> drafter, uint64_t* bytes, int64_t* prefill_end_ns);

  transport::TransferAgent* agent_ = nullptr;
  std::unique_ptr<transport::RegisteredArena> arena_;
  ReceiverOptions options_;
  uint64_t link_digest_ = 0;
  worker::KvTransferMetrics* metrics_ = nullptr;
  std::mutex mu_;
  std::map<std::string, Reservation> reservations_;
  std::mt19937_64 nonces_;
  uint64_t next_id_ = 1;
  int64_t expired_total_ = 0;
};

}  // namespace pdspark::decode
