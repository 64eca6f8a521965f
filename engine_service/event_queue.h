// Hands engine events (produced on the engine thread) to the gRPC handler thread that streams
// them, so the engine never blocks on a slow client.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/serving/request.h"

namespace pdspark::worker {

class EventQueue {
 public:
  void Push(const serving::RequestEvent& event) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(event);
    }
    cv_.notify_one();
  }
  std::optional<serving::RequestEvent> PopFor(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    serving::RequestEvent event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<serving::RequestEvent> events_;
};

}  // namespace pdspark::worker
