// A reusable barrier for the ranks of an in-process group: spin briefly (the common case is
// that peers arrive within microseconds), then block on a condition variable so oversubscribed
// machines (8 ranks on 2 cores) do not burn CPU. A wait longer than the timeout means a peer
// died or deadlocked; the barrier then breaks for good and every current and later Wait returns
// that error, so no rank hangs and no rank runs ahead into a half-finished collective.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "common/base/status.h"

namespace pdspark::parallel {

class GroupBarrier {
 public:
  // `spin_iterations` yield-spins before blocking; 0 blocks at once.
  GroupBarrier(int parties, std::chrono::milliseconds timeout, int spin_iterations);

  GroupBarrier(const GroupBarrier&) = delete;
  GroupBarrier& operator=(const GroupBarrier&) = delete;

  // OK once all parties have arrived in this round; DeadlineExceeded if that takes longer than
  // the timeout; the breaking status if the barrier is (or becomes) broken.
  Status Wait();

  // Breaks the barrier with `reason` (not OK), waking all waiters. The first reason sticks.
  void Break(Status reason);

  // OK while usable, else the breaking status.
  Status status() const;

 private:
  // Wakes every waiter; mu_ must be held.
  void BreakLocked(Status reason);

  const int parties_;
  const std::chrono::milliseconds timeout_;
  const int spin_iterations_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;       // Guarded by mu_.
  Status broken_status_;  // Guarded by mu_; OK while usable.
  // Written under mu_, read without it by spinning waiters.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> broken_{false};
};

}  // namespace pdspark::parallel
