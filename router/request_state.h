// The router's per-request state machine (docs/reliability.md):
//
//   queued -> reserved -> prefilling -> transferring -> decoding -> done
//      |         |            |              |             |
//      +---------+------------+--------------+-------------+--> failed | cancelled
//
// Colocated requests go queued -> decoding. A prefill retry goes back to queued (the
// reservation was released); a decode migration goes decoding -> queued -> decoding on
// another worker. Every stage checks the one absolute deadline, fixed at admission.
#pragma once

#include <chrono>
#include <string_view>

namespace pdspark::router {

enum class RequestState {
  kQueued,        // admitted, waiting for (or between) worker calls
  kReserved,      // cache held on the decode worker, prefill not started
  kPrefilling,    // the prefill worker computes the prompt
  kTransferring,  // the prefill worker pushes the state into the reservation
  kDecoding,      // the decode worker streams tokens
  kDone,          // finished: stop or length
  kFailed,        // a precise error went to the client
  kCancelled,     // the client went away or Abort
};

inline std::string_view RequestStateName(RequestState s) {
  switch (s) {
    case RequestState::kQueued:
      return "queued";
    case RequestState::kReserved:
      return "reserved";
    case RequestState::kPrefilling:
      return "prefilling";
    case RequestState::kTransferring:
      return "transferring";
    case RequestState::kDecoding:
      return "decoding";
    case RequestState::kDone:
      return "done";
    case RequestState::kFailed:
      return "failed";
    case RequestState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

inline bool IsTerminal(RequestState s) {
  return s == RequestState::kDone || s == RequestState::kFailed || s == RequestState::kCancelled;
}

// Whether `from -> to` is an edge of the diagram above. Terminal states have no way out.
inline bool IsAllowedTransition(RequestState from, RequestState to) {
  if (IsTerminal(from)) return false;
  if (IsTerminal(to)) return true;
  switch (to) {
    case RequestState::kQueued:  // retry / migration
      return from != RequestState::kQueued;
    case RequestState::kReserved:
      return from == RequestState::kQueued;
    case RequestState::kPrefilling:
      return from == RequestState::kReserved;
    case RequestState::kTransferring:
      return from == RequestState::kPrefilling;
    case RequestState::kDecoding:
      return from == RequestState::kQueued || from == RequestState::kTransferring;
    default:
      return false;
  }
}

// One request's state and deadline. Not thread-safe: owned by the thread running the request.
class RequestLifecycle {
 public:
  using SystemClock = std::chrono::system_clock;
  explicit RequestLifecycle(SystemClock::time_point deadline) : deadline_(deadline) {}

  RequestState state() const { return state_; }
  SystemClock::time_point deadline() const { return deadline_; }
  bool Expired() const { return SystemClock::now() >= deadline_; }
  // Moves to `to`; false (state unchanged) for an edge the diagram does not have.
  bool Enter(RequestState to) {
    if (!IsAllowedTransition(state_, to)) return false;
    state_ = to;
    return true;
  }

 private:
  SystemClock::time_point deadline_;
  RequestState state_ = RequestState::kQueued;
};

}  // namespace pdspark::router
