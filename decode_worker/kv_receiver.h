// The decode side of a KV transfer. At Reserve it leases the request's worst-case KV pool bytes
// from the engine (ReceiverOptions::lease_cache), prepares the request's sequence in the pool
// with pages for every row the prompt leaves behind, and hands out their page ids with the
// registered pool region: the prefill worker then writes the rows straight into those pages.
// When the engine's prefix cache holds a prefix of the prompt (a conversation's earlier turn),
// the sequence starts as that prefix, sharing its pages, and only the rows past it travel: the
// descriptor says per cache group from which row on (ship_from_rows).
// Only the completion record goes to a small slice of a staging arena. A request is admitted
// only when its record is there, meant for this reservation (nonce), written by a matching
// sender (link digest), and every segment matches its checksum, verified in place on the
// caller's (gRPC) thread; the engine then runs the prepared sequence as it is, on the
// reservation's lease, with no copy. A reservation the prefill side never fills expires.
//
// Pages of a reservation that was not taken (released, expired, refused) are quarantined until
// no write the prefill side posted for it can still land:
//  - a fence (TransferAgent::Fence) closes every connection peers made to this worker, so data a
//    prefill worker posted before a link cut and its kernel retransmits after the link returns
//    meets a closed socket instead of reused pages. The fence waits for a moment with no
//    reservation in flight (a fence fails the transfers under way), unless a reservation would
//    otherwise be refused for a full pool;
//  - ReceiverOptions::late_write_grace has passed: a shared-memory writer has no connection to
//    close, but stops posting at its deadline (the lease's, less a margin) and drains or aborts
//    within its stall timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/transport/link_check.h"
#include "common/transport/registered_arena.h"
#include "common/transport/transfer_agent.h"
#include "common/worker/kv_transfer_metrics.h"
#include "engine/cache/sequence_state.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/prefix_cache.h"
#include "engine/serving/request.h"
#include "pdspark/v1/transfer.pb.h"
#include "pdspark/v1/worker.pb.h"

namespace pdspark::decode {

struct ReservationStats {
  int64_t active = 0;
  int64_t expired_total = 0;
  uint64_t bytes_reserved = 0;  // KV pool bytes of the reservations' prepared sequences
  int64_t quarantined = 0;      // not taken, held until late writes are impossible
  int64_t fences_total = 0;
};

struct ReceiverOptions {
  uint64_t arena_bytes = 256ull << 20;  // completion records, with their DSpark rings
  std::string incarnation_id;
  transport::LinkInfo link;  // this worker's side of the handshake
  int64_t block_rows = 256;  // this worker's cache block rows
  const engine::CacheLayout* cache_layout = nullptr;
  // The engine's KV pool lease for a reservation (ServingEngine::ReserveCache); unset: none.
  std::function<StatusOr<serving::CacheLease>(const v1::ReserveRequest&)> lease_cache;
  // An empty sequence in the engine's KV pool (ServingEngine::NewSequence), and that pool as
  // the transfer agent registered it.
  std::function<std::unique_ptr<engine::SequenceState>()> new_sequence;
  // The engine's longest cached prefix of a prompt (ServingEngine::CachedPrefix); unset: none.
  // With a hit only the rest of the prompt's rows travel (a reservation names its prompt).
  std::function<serving::PrefixHit(std::span<const int32_t>)> cached_prefix;
  transport::RemoteRegion pool_region;
  int64_t page_bytes = 0;
  std::chrono::milliseconds late_write_grace{10000};
};

class KvReceiver {
 public:
  using Clock = std::chrono::steady_clock;

  static StatusOr<std::unique_ptr<KvReceiver>> Create(transport::TransferAgent* agent,
                                                      ReceiverOptions options,
                                                      worker::KvTransferMetrics* metrics);
  ~KvReceiver();

  StatusOr<v1::ReserveResponse> Reserve(const v1::ReserveRequest& request);
  // `transfer_completed`: the prefill side finished writing (the router heard so), so the
  // memory returns at once; otherwise it is quarantined for the late-write grace.
  bool Release(const std::string& reservation_id, bool transfer_completed);
  // Checks what was delivered into the reservation and hands over its sequence (and the DSpark
  // context ring restored into `drafter`, which is non-null when this worker speculates). The
  // reservation is gone afterwards, whether or not the delivery was good.
  StatusOr<std::shared_ptr<serving::PrefilledState>> Take(
      const std::string& reservation_id, std::unique_ptr<dspark::DrafterState> drafter);
  ReservationStats Stats();

 private:
  struct Reservation {
    uint64_t offset = 0;  // of the record's slice in the arena
    Clock::time_point expires;
    uint64_t nonce = 0;
    engine::StagingLayout layout;  // first_row: the first row the transfer fills
    int64_t cached_tokens = 0;     // of the prompt, held here before the transfer
    serving::CacheLease lease;
    std::unique_ptr<engine::SequenceState> sequence;  // the pages the rows land in
  };
  KvReceiver() = default;
  struct Quarantined {
    Clock::time_point grace_end;
    bool fenced = false;  // a fence closed the connections it could have been written through
    Reservation reservation;
  };
  void ExpireLocked(Clock::time_point now);
  // Keeps the reservation's memory away from other requests until late writes are impossible.
  void QuarantineLocked(Reservation reservation, Clock::time_point now);
  // Closes the connections the quarantined reservations could still be written through.
  void FenceLocked();
  // The engine's lease for `request`; a full pool first fences to free the quarantined leases.
  StatusOr<serving::CacheLease> LeaseLocked(const v1::ReserveRequest& request);
  // The pages the transfer fills: fresh ones for the whole prompt, or `hit` (a cached prefix of
  // it; tokens 0: none) grown by pages for the rest (and reservation.layout ships only the rest).
  Status PrepareSequence(serving::PrefixHit hit, Reservation& reservation);
  // The descriptor the prefill worker writes by.
  StatusOr<v1::TransferDescriptor> Describe(const Reservation& reservation,
                                            const std::string& address, uint32_t prompt_tokens,
                                            std::chrono::milliseconds lease) const;
  // Checks the delivery and restores the DSpark ring; the sequence stays in the reservation.
  Status Verify(const Reservation& reservation, dspark::DrafterState* drafter, uint64_t* bytes,
                int64_t* prefill_end_ns) const;

  transport::TransferAgent* agent_ = nullptr;
  std::unique_ptr<transport::RegisteredArena> arena_;
  ReceiverOptions options_;
  uint64_t link_digest_ = 0;
  worker::KvTransferMetrics* metrics_ = nullptr;
  std::mutex mu_;
  std::map<std::string, Reservation> reservations_;
  std::vector<Quarantined> quarantined_;
  // Expires leases and ends quarantines on time even when no call comes.
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  std::thread reaper_;
  std::mt19937_64 nonces_;
  uint64_t next_id_ = 1;
  int64_t expired_total_ = 0;
  int64_t fences_total_ = 0;
};

}  // namespace pdspark::decode
