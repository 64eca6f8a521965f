#include "common/transport/transfer_agent.h"

#include <algorithm>
#include <memory>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::transport {
namespace {

constexpr char kReasonUrl[] = "pdspark.transfer/reason";

}  // namespace

std::string_view FailureReasonName(FailureReason reason) {
  switch (reason) {
    case FailureReason::kStall:
      return "stall";
    case FailureReason::kDeadline:
      return "deadline";
    case FailureReason::kPeerFailed:
      return "peer_failed";
    case FailureReason::kCancelled:
      return "cancelled";
    case FailureReason::kRefused:
      return "refused";
    case FailureReason::kInvalid:
      return "invalid";
  }
  return "invalid";
}

Status TransferError(FailureReason reason, absl::StatusCode code, std::string_view message) {
  Status status(code, std::string(message));
  status.SetPayload(kReasonUrl, absl::Cord(std::string(FailureReasonName(reason))));
  return status;
}

FailureReason ReasonOf(const Status& status) {
  if (auto payload = status.GetPayload(kReasonUrl)) {
    const std::string name(*payload);
    for (auto r : {FailureReason::kStall, FailureReason::kDeadline, FailureReason::kPeerFailed,
                   FailureReason::kCancelled, FailureReason::kRefused}) {
      if (name == FailureReasonName(r)) return r;
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return FailureReason::kDeadline;
    case absl::StatusCode::kUnavailable:
      return FailureReason::kPeerFailed;
    case absl::StatusCode::kCancelled:
      return FailureReason::kCancelled;
    case absl::StatusCode::kFailedPrecondition:
      return FailureReason::kRefused;
    default:
      return FailureReason::kInvalid;
  }
}

void TransferTracker::Add(int64_t operations) {
  std::lock_guard lock(mu_);
  pending_ += operations;
}

void TransferTracker::Complete(const Status& status) {
  {
    std::lock_guard lock(mu_);
    --pending_;
    ++completed_;
    if (status_.ok() && !status.ok()) status_ = status;
  }
  cv_.notify_all();
}

int64_t TransferTracker::pending() const {
  std::lock_guard lock(mu_);
  return pending_;
}

int64_t TransferTracker::completed() const {
  std::lock_guard lock(mu_);
  return completed_;
}

Status TransferTracker::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

void TransferTracker::WaitForChange(int64_t seen, Clock::time_point until) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, until, [&] { return completed_ != seen || pending_ == 0; });
}

bool ProgressWatch::Stalled(const TransferTracker& tracker, Clock::time_point now) {
  const int64_t completed = tracker.completed();
  if (completed != seen_ || tracker.pending() == 0) {
    seen_ = completed;
    last_progress_ = now;
    return false;
  }
  return now - last_progress_ >= stall_;
}

Status TransferAgent::Write(const std::string& peer_id, const RemoteRegion& region,
                            const std::vector<WriteOp>& ops, Clock::time_point deadline,
                            std::chrono::milliseconds stall) {
  // On the heap: an operation the transport never completed (AwaitCompletion gave up on it)
  // still holds the tracker, which then outlives this call rather than let it write freed memory.
  auto tracker = std::make_unique<TransferTracker>();
  Status posted = PostWrites(peer_id, region, ops, *tracker);
  if (posted.ok()) posted = PostFlush(peer_id, *tracker);
  Status done = AwaitCompletion(*this, peer_id, *tracker, deadline, stall);
  if (tracker->pending() > 0) static_cast<void>(tracker.release());  // kept for good
  return posted.ok() ? done : posted;
}

Status AwaitCompletion(TransferAgent& agent, const std::string& peer_id, TransferTracker& tracker,
                       Clock::time_point deadline, std::chrono::milliseconds stall) {
  ProgressWatch watch(stall);
  Status outcome;
  while (tracker.pending() > 0) {
    const auto now = Clock::now();
    if (outcome.ok() && now >= deadline) {
      outcome = TransferError(
          FailureReason::kDeadline, absl::StatusCode::kDeadlineExceeded,
          absl::StrCat("KV transfer to peer ", peer_id, " did not complete before its deadline"));
    }
    if (watch.Stalled(tracker, now)) {
      agent.AbortPeer(peer_id);
      outcome = TransferError(
          FailureReason::kStall, absl::StatusCode::kDeadlineExceeded,
          absl::StrCat("KV transfer to peer ", peer_id, " stalled: no write completed for ",
                       stall.count(), " ms (peer stopped, overloaded or unreachable)"));
      // The abort completes everything with errors; allow it a bounded moment to do so.
      const auto until = Clock::now() + std::chrono::seconds(5);
      while (tracker.pending() > 0 && Clock::now() < until) {
        tracker.WaitForChange(tracker.completed(), until);
      }
      if (tracker.pending() > 0) {
        LOG_ERROR("transfer operations still pending after aborting peer={} pending={}", peer_id,
                  tracker.pending());
      }
      return outcome;
    }
    auto wake = watch.last_progress() + stall;
    if (outcome.ok()) wake = std::min(wake, deadline);
    tracker.WaitForChange(tracker.completed(),
                          std::max(wake, now + std::chrono::microseconds(100)));
  }
  return outcome.ok() ? tracker.status() : outcome;
}

}  // namespace pdspark::transport
