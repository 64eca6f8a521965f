// The decode side of a KV transfer: a staging arena registered once with the transfer agent,
// reservations carved out of it with a lease, and the hand-over of a delivered state to the
// engine. A lease the prefill side never fills expires and its memory returns to the arena.
#pragma once

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/base/status.h"
#include "common/transport/transfer_agent.h"
#include "common/worker/kv_transfer_metrics.h"
#include "pdspark/v1/transfer.pb.h"
#include "pdspark/v1/worker.pb.h"

namespace pdspark::decode {

struct ReservationStats {
  int64_t active = 0;
  int64_t expired_total = 0;
  uint64_t bytes_reserved = 0;
};

class KvReceiver {
 public:
  using Clock = std::chrono::steady_clock;
  // `bound(tokens)` is the staging size one request of `tokens` prompt tokens needs.
  using SizeBound = std::function<uint64_t(int64_t tokens)>;

  static StatusOr<std::unique_ptr<KvReceiver>> Create(transport::TransferAgent* agent,
                                                      uint64_t arena_bytes,
                                                      std::string incarnation_id,
                                                      std::string config_fingerprint,
                                                      SizeBound bound,
                                                      worker::KvTransferMetrics* metrics);
  ~KvReceiver();

  StatusOr<v1::ReserveResponse> Reserve(const v1::ReserveRequest& request);
  bool Release(const std::string& reservation_id);
  // Removes the reservation and returns the state the prefill worker delivered into it.
  StatusOr<std::string> Take(const std::string& reservation_id);
  ReservationStats Stats();

 private:
  struct Reservation {
    uint64_t offset = 0;
    uint64_t size = 0;
    Clock::time_point expires;
  };
  KvReceiver() = default;
  void ExpireLocked(Clock::time_point now);
  StatusOr<uint64_t> AllocateLocked(uint64_t size);

  transport::TransferAgent* agent_ = nullptr;
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char[], FreeDeleter> arena_;
  uint64_t arena_bytes_ = 0;
  transport::LocalRegion region_;
  std::string incarnation_id_;
  std::string fingerprint_;
  SizeBound bound_;
  worker::KvTransferMetrics* metrics_ = nullptr;
  std::mutex mu_;
  std::map<std::string, Reservation> reservations_;
  std::map<uint64_t, uint64_t> used_;  // offset -> size, for first-fit allocation
  uint64_t next_id_ = 1;
  int64_t expired_total_ = 0;
};

}  // namespace pdspark::decode
