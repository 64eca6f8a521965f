#include "engine/serving/speculation/pending_context.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdspark::serving {

// Dropping keeps `keep_` positions so that, after a verify round truncates at most a rollback's
// worth of them, Flush still appends at least the ring's capacity: every slot is then written
// after the skip, and the ring equals the one that appending every position would have built.
PendingContext::PendingContext(int64_t feature_width, const dspark::DrafterState& ring)
    : width_(std::max<int64_t>(feature_width, 1)), keep_(ring.capacity() + ring.max_rollback()) {
  const int64_t fits = kMaxBytes / (width_ * static_cast<int64_t>(sizeof(float)));
  // Dropping every `keep_` positions copies `keep_` held ones: at most one copy per position.
  can_drop_ = fits >= 2 * keep_;
  limit_ = can_drop_ ? 2 * keep_ : kMinPositions;
}

void PendingContext::Add(const float* features, int64_t count) {
  features_.insert(features_.end(), features, features + count * width_);
  if (!can_drop_ || held() < limit_) return;
  const int64_t drop = held() - keep_;
  features_.erase(features_.begin(), features_.begin() + drop * width_);
  dropped_ += drop;
}

Status PendingContext::Truncate(int64_t positions) {
  if (positions < dropped_) {
    return absl::OutOfRangeError(absl::StrCat("drafter context truncate to ", positions,
                                              " positions reaches dropped ones (", dropped_, ")"));
  }
  features_.resize(std::min(positions - dropped_, held()) * width_);
  return absl::OkStatus();
}

void PendingContext::Flush(const dspark::Drafter& drafter, dspark::DrafterState& state) {
  if (dropped_ > 0) state.Skip(dropped_);
  drafter.AppendContext(state, features_.data(), held());
  dropped_ = 0;
  features_.clear();
}

}  // namespace pdspark::serving
