#include "engine/cache/paged_rows.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdspark::engine {

PagedRows::PagedRows(BlockPool* pool) : pool_(pool) {}

PagedRows::~PagedRows() { Clear(); }

PagedRows::PagedRows(PagedRows&& other) noexcept
    : pool_(other.pool_), blocks_(std::move(other.blocks_)), first_block_(other.first_block_),
      size_(other.size_) {
  other.blocks_.clear();
  other.size_ = 0;
  other.first_block_ = 0;
}

float* PagedRows::Append() {
  const int64_t rows = pool_->rows_per_block();
  const int64_t block = size_ / rows;
  if (block - first_block_ >= static_cast<int64_t>(blocks_.size())) {
    if (blocks_.empty()) first_block_ = block;
    blocks_.push_back(pool_->Allocate());
  }
  ++size_;
  return Row(size_ - 1);
}

float* PagedRows::Row(int64_t row) {
  const int64_t rows = pool_->rows_per_block();
  return blocks_[row / rows - first_block_] + (row % rows) * pool_->row_width();
}

const float* PagedRows::Row(int64_t row) const {
  const int64_t rows = pool_->rows_per_block();
  return blocks_[row / rows - first_block_] + (row % rows) * pool_->row_width();
}

void PagedRows::Truncate(int64_t size) {
  if (size >= size_) return;
  size_ = size;
  const int64_t rows = pool_->rows_per_block();
  const int64_t blocks_needed = (size_ + rows - 1) / rows - first_block_;
  while (static_cast<int64_t>(blocks_.size()) > std::max<int64_t>(blocks_needed, 0)) {
    pool_->Free(blocks_.back());
    blocks_.pop_back();
  }
  if (blocks_.empty()) first_block_ = size_ / rows;
}

void PagedRows::ReleaseBelow(int64_t row) {
  const int64_t rows = pool_->rows_per_block();
  // Keep the block holding the last row so Append never re-allocates a released index.
  while (!blocks_.empty() && (first_block_ + 1) * rows <= row &&
         (first_block_ + 1) * rows < size_) {
    pool_->Free(blocks_.front());
    blocks_.pop_front();
    ++first_block_;
  }
}

void PagedRows::Clear() {
  for (float* block : blocks_) pool_->Free(block);
  blocks_.clear();
  first_block_ = 0;
  size_ = 0;
}

namespace {

void PutInt(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }

bool GetInt(const std::string& in, size_t& offset, int64_t& v) {
  if (offset + sizeof(v) > in.size()) return false;
  std::memcpy(&v, in.data() + offset, sizeof(v));
  offset += sizeof(v);
  return true;
}

}  // namespace

void PagedRows::AppendTo(std::string& out) const {
  const int64_t first = blocks_.empty() ? size_ : std::min(first_row(), size_);
  PutInt(out, first);
  PutInt(out, size_);
  for (int64_t r = first; r < size_; ++r) {
    out.append(reinterpret_cast<const char*>(Row(r)), width() * sizeof(float));
  }
}

Status PagedRows::ReadFrom(const std::string& in, size_t& offset) {
  Clear();
  int64_t first = 0, size = 0;
  if (!GetInt(in, offset, first) || !GetInt(in, offset, size) || first < 0 || first > size) {
    return absl::DataLossError("cache snapshot: bad row-group header");
  }
  const size_t row_bytes = width() * sizeof(float);
  if (offset + (size - first) * row_bytes > in.size()) {
    return absl::DataLossError(absl::StrCat("cache snapshot: truncated rows (need ",
                                            (size - first) * row_bytes, " bytes)"));
  }
  Assign(first, size, in.data() + offset);
  offset += (size - first) * row_bytes;
  return absl::OkStatus();
}

void PagedRows::Assign(int64_t first, int64_t size, const char* rows) {
  Clear();
  const size_t row_bytes = width() * sizeof(float);
  // Recreate the block layout: start at the block holding `first`.
  first_block_ = first / pool_->rows_per_block();
  size_ = first_block_ * pool_->rows_per_block();
  while (size_ < first) {
    if (blocks_.empty()) blocks_.push_back(pool_->Allocate());
    ++size_;
  }
  // One copy per block: rows of a block are contiguous on both sides.
  const int64_t per_block = pool_->rows_per_block();
  for (int64_t r = first; r < size;) {
    const int64_t n = std::min(size - r, per_block - r % per_block);
    float* dst = Append();  // allocates the block `r` starts
    size_ += n - 1;
    std::memcpy(dst, rows, n * row_bytes);
    rows += n * row_bytes;
    r += n;
  }
}

}  // namespace pdspark::engine
