#include "engine/parallel/group_barrier.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace pdspark::parallel {

GroupBarrier::GroupBarrier(int parties, std::chrono::milliseconds timeout, int spin_iterations)
    : parties_(parties), timeout_(timeout), spin_iterations_(spin_iterations) {}

Status GroupBarrier::Wait() {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  uint64_t generation;
  {
    std::unique_lock lock(mu_);
    if (!broken_status_.ok()) return broken_status_;
    generation = generation_.load(std::memory_order_relaxed);
    if (++arrived_ == parties_) {
      arrived_ = 0;
      // Release: everything the peers wrote before arriving (they held mu_ after writing, and
      // we acquired it) becomes visible to the spinners that acquire the new generation.
      generation_.store(generation + 1, std::memory_order_release);
      lock.unlock();
      cv_.notify_all();
      return absl::OkStatus();
    }
  }
  for (int i = 0; i < spin_iterations_; ++i) {
    if (generation_.load(std::memory_order_acquire) != generation) return absl::OkStatus();
    if (broken_.load(std::memory_order_acquire)) break;
    std::this_thread::yield();
  }
  std::unique_lock lock(mu_);
  const auto released = [&] { return generation_.load() != generation || !broken_status_.ok(); };
  if (!cv_.wait_until(lock, deadline, released)) {
    BreakLocked(absl::DeadlineExceededError(
        absl::StrCat("barrier timed out after ", timeout_.count(), " ms with ", arrived_, " of ",
                     parties_, " ranks arrived (a rank died or deadlocked)")));
    lock.unlock();
    cv_.notify_all();
  }
  // A completed round wins over a break that came after it.
  if (generation_.load() != generation) return absl::OkStatus();
  return broken_status_;
}

void GroupBarrier::Break(Status reason) {
  {
    std::lock_guard lock(mu_);
    BreakLocked(std::move(reason));
  }
  cv_.notify_all();
}

Status GroupBarrier::status() const {
  std::lock_guard lock(mu_);
  return broken_status_;
}

void GroupBarrier::BreakLocked(Status reason) {
  if (!broken_status_.ok() || reason.ok()) return;
  broken_status_ = std::move(reason);
  broken_.store(true, std::memory_order_release);
}

}  // namespace pdspark::parallel
