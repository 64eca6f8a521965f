#include "engine/dspark/drafter_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdspark::dspark {

DrafterState::DrafterState(int64_t stages, int64_t window, int64_t max_rollback, int64_t row_width)
    : stages_(stages),
      window_(window),
      max_rollback_(max_rollback),
      row_width_(row_width),
      ring_(capacity() * stages * row_width) {}

void DrafterState::Append(const float* rows) {
  const int64_t slot = num_positions_ % capacity();
  std::copy_n(rows, stages_ * row_width_, ring_.data() + slot * stages_ * row_width_);
  ++num_positions_;
}

const float* DrafterState::Row(int64_t stage, int64_t position) const {
  const int64_t slot = position % capacity();
  return ring_.data() + (slot * stages_ + stage) * row_width_;
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

// Layout: 5 int64 header (stages, window, max_rollback, row_width, positions) then the ring.
std::string DrafterState::Serialize() const {
  const int64_t header[5] = {stages_, window_, max_rollback_, row_width_, num_positions_};
  std::string out(sizeof(header) + ring_.size() * sizeof(float), '\0');
  std::memcpy(out.data(), header, sizeof(header));
  std::memcpy(out.data() + sizeof(header), ring_.data(), ring_.size() * sizeof(float));
  return out;
}

Status DrafterState::Restore(std::string_view bytes) {
  int64_t header[5];
  if (bytes.size() != sizeof(header) + ring_.size() * sizeof(float)) {
    return absl::InvalidArgumentError("drafter state: size does not match this drafter");
  }
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[0] != stages_ || header[1] != window_ || header[2] != max_rollback_ ||
      header[3] != row_width_ || header[4] < 0) {
    return absl::InvalidArgumentError("drafter state: layout does not match this drafter");
  }
  num_positions_ = header[4];
  std::memcpy(ring_.data(), bytes.data() + sizeof(header), ring_.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace pdspark::dspark
