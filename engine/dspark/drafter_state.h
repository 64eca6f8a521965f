// Per-sequence drafter context: for every drafter stage, the context K=V row of each committed
// position (kv_norm(wkv(main_x)), RoPE'd, FP8-simulated), kept in a ring. The drafter reads the
// last `window` rows; the ring holds `window + max_rollback` so that a verify round can append
// its gamma+1 rows and Truncate back to the committed length without losing needed context.
// Mirrors SequenceState: Append / Truncate / Serialize / Restore.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::dspark {

class DrafterState {
 public:
  DrafterState(int64_t stages, int64_t window, int64_t max_rollback, int64_t row_width);

  int64_t num_positions() const { return num_positions_; }
  int64_t stages() const { return stages_; }
  int64_t row_width() const { return row_width_; }
  int64_t window() const { return window_; }
  int64_t max_rollback() const { return max_rollback_; }
  int64_t capacity() const { return window_ + max_rollback_; }
  // rows: [stages, row_width] for position num_positions().
  void Append(const float* rows);
  // Advances past `count` positions without rows. Their slots keep stale rows, so the caller
  // must Append capacity() positions before anything reads the ring (then every slot is fresh
  // and the ring equals one that appended every position); see serving::PendingContext.
  void Skip(int64_t count) { num_positions_ += count; }
  // Context row of `stage` at `position` (must be one of the last capacity() positions).
  const float* Row(int64_t stage, int64_t position) const;
  // Keeps positions < `position`; fails if that needs rows the ring has already overwritten.
  Status Truncate(int64_t position);
  std::string Serialize() const;
  Status Restore(std::string_view bytes);
  int64_t bytes() const { return static_cast<int64_t>(ring_.size() * sizeof(float)); }

 private:
  int64_t stages_, window_, max_rollback_, row_width_;
  int64_t num_positions_ = 0;
  std::vector<float> ring_;  // [capacity, stages, row_width]
};

}  // namespace pdspark::dspark
