// A bounded number of requests in the router at once. Beyond it new requests are refused at
// once (HTTP 429 / RESOURCE_EXHAUSTED) instead of queueing without bound, so overload shows up
// as fast errors clients can back off from rather than as latency for everyone.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace pdspark::router {

class AdmissionController {
 public:
  // Held while a request is in the router; releases its slot when destroyed.
  class Ticket {
   public:
    explicit Ticket(AdmissionController* owner) : owner_(owner) {}
    ~Ticket() { owner_->in_flight_.fetch_sub(1); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    AdmissionController* owner_;
  };

  explicit AdmissionController(uint32_t max_in_flight) : max_in_flight_(max_in_flight) {}

  // Null when full.
  std::unique_ptr<Ticket> TryAdmit();

  uint32_t in_flight() const { return in_flight_.load(); }
  uint32_t max_in_flight() const { return max_in_flight_; }

 private:
  const uint32_t max_in_flight_;
  std::atomic<uint32_t> in_flight_{0};
};

}  // namespace pdspark::router
