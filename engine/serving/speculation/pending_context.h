// The DSpark context of a request's positions that are committed (or being verified) but not
// yet in its drafter ring: their target features, held until the request drafts, ships its
// ring or holds too many. The ring's row of a position depends only on that position's
// features, so appending lazily — one matrix product over many positions instead of a
// matrix-vector product per position and step — gives the same ring. A request that seldom
// drafts (`--spec-tokens auto` where speculation does not pay, a long prompt whose prefill
// ships its ring) goes further: positions the ring would overwrite before anything reads them
// are dropped instead of computed, when holding a ring's worth of features fits the budget.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "engine/dspark/drafter.h"
#include "engine/dspark/drafter_state.h"

namespace pdspark::serving {

class PendingContext {
 public:
  // Features held at most, per request, before they are appended or dropped.
  static constexpr int64_t kMaxBytes = 2 << 20;
  // Positions always held before appending (when a ring's worth does not fit kMaxBytes).
  static constexpr int64_t kMinPositions = 16;

  // `feature_width`: floats per position; `ring`: the request's (empty or not) drafter ring.
  PendingContext(int64_t feature_width, const dspark::DrafterState& ring);

  int64_t held() const { return static_cast<int64_t>(features_.size()) / width_; }
  // Positions after the ring's that this covers (dropped and held).
  int64_t positions() const { return dropped_ + held(); }
  // Adds the features of `count` positions; then, when the limit is reached, drops the oldest
  // positions (keeping a ring's worth plus its rollback) or asks for a flush.
  void Add(const float* features, int64_t count);
  // Whether Flush should run now (the limit is reached and nothing can be dropped).
  bool MustFlush() const { return held() >= limit_ && !can_drop_; }
  // Keeps the first `positions` positions; fails if that reaches into dropped ones.
  Status Truncate(int64_t positions);
  // Appends what is held to `state` (after skipping the dropped positions) and empties this.
  void Flush(const dspark::Drafter& drafter, dspark::DrafterState& state);

 private:
  int64_t width_;
  int64_t keep_;   // positions kept when dropping: the ring's capacity plus a rollback
  int64_t limit_;  // positions held at most
  bool can_drop_;  // a ring's worth of positions fits the budget
  int64_t dropped_ = 0;
  std::vector<float> features_;  // [held, width]
};

}  // namespace pdspark::serving
