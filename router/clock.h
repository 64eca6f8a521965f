// The router's notion of "now" for heartbeat expiry, injectable so tests can move time.
#pragma once

#include <atomic>
#include <chrono>

namespace pdspark::router {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class SteadyClock : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

// A manually advanced clock for tests.
class FakeClock : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(std::chrono::nanoseconds(now_ns_.load())); }
  void Advance(std::chrono::nanoseconds d) { now_ns_ += d.count(); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace pdspark::router
