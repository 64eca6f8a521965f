#include "engine/dspark/drafter_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdspark::dspark {

StatusOr<std::unique_ptr<DrafterState>> DrafterState::Create(engine::KvPool& pool, int64_t stages,
                                                             int64_t window, int64_t max_rollback,
                                                             int64_t row_width,
                                                             engine::PageHolder holder) {
  if (row_width * static_cast<int64_t>(sizeof(float)) > pool.page_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("DSpark context rows of ", row_width,
                                                   " floats do not fit a ", pool.page_bytes(),
                                                   "-byte KV page: raise --block-size"));
  }
  std::unique_ptr<DrafterState> state(
      new DrafterState(&pool.ForGroup("drafter", row_width * sizeof(float)), stages, window,
                       max_rollback, row_width));
  state->ring_.HoldFor(holder);
  RETURN_IF_ERROR(state->ring_.Resize(state->ring_rows()));
  // Pages come back with another request's rows: slots not appended yet are shipped and
  // compared as they are (Serialize), so they start as zeros, as a fresh ring always did.
  const engine::PagedRows& ring = state->ring_;
  ring.ForEachPageRun(0, state->ring_rows(), [&](int64_t, char* rows, int64_t n) {
    pool.ZeroBytes(rows, n * ring.row_bytes());
  });
  return state;
}

DrafterState::DrafterState(engine::PageGroup* group, int64_t stages, int64_t window,
                           int64_t max_rollback, int64_t row_width)
    : pool_(&group->pool()),
      stages_(stages),
      window_(window),
      max_rollback_(max_rollback),
      row_width_(row_width),
      ring_(group) {}

StatusOr<std::unique_ptr<DrafterState>> DrafterState::Clone(engine::PageHolder holder) const {
  ASSIGN_OR_RETURN(auto copy, Create(*pool_, stages_, window_, max_rollback_, row_width_, holder));
  // Both rings start at row 0 of fresh pages of one group: their page runs coincide.
  ring_.ForEachPageRun(0, ring_rows(), [&](int64_t r, const char* rows, int64_t n) {
    pool_->CopyBytes(copy->ring_.Row(r), rows, n * ring_.row_bytes());
  });
  copy->num_positions_ = num_positions_;
  return copy;
}

void DrafterState::Append(const float* rows) {
  const int64_t slot = num_positions_ % capacity();
  for (int64_t stage = 0; stage < stages_; ++stage) {
    pool_->WriteBytes(ring_.Row(slot * stages_ + stage), rows + stage * row_width_,
                      row_width_ * sizeof(float));
  }
  ++num_positions_;
}

const float* DrafterState::Row(int64_t stage, int64_t position) const {
  const int64_t slot = position % capacity();
  return ring_.Floats(slot * stages_ + stage);
}

float* DrafterState::Row(int64_t stage, int64_t position) {
  const int64_t slot = position % capacity();
  return ring_.Floats(slot * stages_ + stage);
}

Status DrafterState::Truncate(int64_t position) {
  if (position < 0 || position > num_positions_) {
    return absl::OutOfRangeError(
        absl::StrCat("drafter truncate to ", position, " of ", num_positions_, " positions"));
  }
  // After truncation the window [position - window, position) must still be in the ring.
  if (std::max<int64_t>(0, position - window_) < num_positions_ - capacity()) {
    return absl::OutOfRangeError(absl::StrCat("drafter truncate to ", position,
                                              " rolls back past the ring (", max_rollback_,
                                              " positions)"));
  }
  num_positions_ = position;
  return absl::OkStatus();
}

uint64_t DrafterState::SerializedBytes(int64_t stages, int64_t window, int64_t max_rollback,
                                       int64_t row_width) {
  return 5 * sizeof(int64_t) +
         static_cast<uint64_t>((window + max_rollback) * stages * row_width) * sizeof(float);
}

// Layout: 5 int64 header (stages, window, max_rollback, row_width, positions) then the ring.
std::string DrafterState::Serialize() const {
  const int64_t header[5] = {stages_, window_, max_rollback_, row_width_, num_positions_};
  const size_t row_bytes = row_width_ * sizeof(float);
  std::string out(SerializedBytes(stages_, window_, max_rollback_, row_width_), '\0');
  std::memcpy(out.data(), header, sizeof(header));
  ring_.ForEachPageRun(0, ring_rows(), [&](int64_t r, const char* rows, int64_t n) {
    pool_->ReadBytes(out.data() + sizeof(header) + r * row_bytes, rows, n * row_bytes);
  });
  return out;
}

Status DrafterState::Restore(std::string_view bytes) {
  int64_t header[5];
  const size_t row_bytes = row_width_ * sizeof(float);
  if (bytes.size() != SerializedBytes(stages_, window_, max_rollback_, row_width_)) {
    return absl::InvalidArgumentError("drafter state: size does not match this drafter");
  }
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[0] != stages_ || header[1] != window_ || header[2] != max_rollback_ ||
      header[3] != row_width_ || header[4] < 0) {
    return absl::InvalidArgumentError("drafter state: layout does not match this drafter");
  }
  num_positions_ = header[4];
  ring_.ForEachPageRun(0, ring_rows(), [&](int64_t r, char* rows, int64_t n) {
    pool_->WriteBytes(rows, bytes.data() + sizeof(header) + r * row_bytes, n * row_bytes);
  });
  return absl::OkStatus();
}

}  // namespace pdspark::dspark
