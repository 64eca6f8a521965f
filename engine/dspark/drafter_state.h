// Per-sequence drafter context: for every drafter stage, the context K=V row of each committed
// position (kv_norm(wkv(main_x)), RoPE'd, FP8-simulated), kept in a ring. The drafter reads the
// last `window` rows; the ring holds `window + max_rollback` so that a verify round can append
// its gamma+1 rows and Truncate back to the committed length without losing needed context.
// Mirrors SequenceState: Append / Truncate / Serialize / Restore. The ring lives in pages of the
// model's KV pool (cache group "drafter"), so the pool bounds it with everything else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "engine/cache/kv_pool.h"
#include "engine/cache/paged_rows.h"

namespace pdspark::dspark {

class DrafterState {
 public:
  // ResourceExhausted when the pool has no room for the ring.
  static StatusOr<std::unique_ptr<DrafterState>> Create(
      engine::KvPool& pool, int64_t stages, int64_t window, int64_t max_rollback, int64_t row_width,
      engine::PageHolder holder = engine::PageHolder::kRequest);

  int64_t num_positions() const { return num_positions_; }
  int64_t stages() const { return stages_; }
  int64_t row_width() const { return row_width_; }
  int64_t window() const { return window_; }
  int64_t max_rollback() const { return max_rollback_; }
  int64_t capacity() const { return window_ + max_rollback_; }
  // rows: [stages, row_width] for position num_positions(), from the host.
  void Append(const float* rows);
  // Advances past `count` positions without rows. Their slots keep stale rows, so the caller
  // must Append capacity() positions before anything reads the ring (then every slot is fresh
  // and the ring equals one that appended every position); see serving::PendingContext.
  void Skip(int64_t count) { num_positions_ += count; }
  // Context row of `stage` at `position` (one of the last capacity() positions, or of the next
  // ones, which the drafter writes through its backend before it Skips past them), in the
  // pool's memory (a GPU's when the model runs on one).
  const float* Row(int64_t stage, int64_t position) const;
  float* Row(int64_t stage, int64_t position);
  // Keeps positions < `position`; fails if that needs rows the ring has already overwritten.
  Status Truncate(int64_t position);
  std::string Serialize() const;
  Status Restore(std::string_view bytes);
  // A copy in fresh pages of the same pool held by `holder` (the prefix cache keeps a prompt's
  // ring so); ResourceExhausted when the pool has no room.
  StatusOr<std::unique_ptr<DrafterState>> Clone(
      engine::PageHolder holder = engine::PageHolder::kRequest) const;
  // Size of Serialize()'s bytes for a ring of these dimensions.
  static uint64_t SerializedBytes(int64_t stages, int64_t window, int64_t max_rollback,
                                  int64_t row_width);
  // Pool bytes the ring holds.
  int64_t bytes() const { return ring_.bytes(); }
  // The pool whose pages hold the ring.
  const engine::KvPool& pool() const { return *pool_; }

 private:
  DrafterState(engine::PageGroup* group, int64_t stages, int64_t window, int64_t max_rollback,
               int64_t row_width);
  int64_t ring_rows() const { return capacity() * stages_; }

  engine::KvPool* pool_;
  int64_t stages_, window_, max_rollback_, row_width_;
  int64_t num_positions_ = 0;
  engine::PagedRows ring_;  // rows [slot * stages + stage], row_width floats each
};

}  // namespace pdspark::dspark
