// A growable array of fixed-width fp32 rows stored in pool blocks. Rows are addressed by their
// logical index (token position or compressed-entry index); whole blocks that fall below the
// retention point can be released, so a sliding-window group keeps O(window) memory while its
// indices keep counting from 0.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "common/base/status.h"
#include "engine/cache/block_pool.h"

namespace pdspark::engine {

class PagedRows {
 public:
  explicit PagedRows(BlockPool* pool);
  ~PagedRows();
  PagedRows(PagedRows&& other) noexcept;
  PagedRows& operator=(PagedRows&&) = delete;
  PagedRows(const PagedRows&) = delete;

  int64_t size() const { return size_; }
  int64_t width() const { return pool_->row_width(); }
  // The lowest row still stored (rows below it were released).
  int64_t first_row() const { return first_block_ * pool_->rows_per_block(); }

  float* Append();
  float* Row(int64_t row);
  const float* Row(int64_t row) const;

  // Drops rows >= size (speculation rollback); frees blocks left empty.
  void Truncate(int64_t size);
  // Frees every block whose rows are all below `row`.
  void ReleaseBelow(int64_t row);
  void Clear();

  int64_t bytes() const { return static_cast<int64_t>(blocks_.size()) * pool_->block_bytes(); }

  // Serialised as: first_row, size, then rows [first_row, size) as raw floats.
  void AppendTo(std::string& out) const;
  // Reads what AppendTo wrote, advancing `offset`.
  Status ReadFrom(const std::string& in, size_t& offset);
  // Replaces the contents with rows [first, size), copied from `rows` (raw floats), laid out in
  // blocks as if the rows below `first` had been appended and released.
  void Assign(int64_t first, int64_t size, const char* rows);

 private:
  BlockPool* pool_;
  std::deque<float*> blocks_;
  int64_t first_block_ = 0;  // logical index of blocks_.front()
  int64_t size_ = 0;
};

}  // namespace pdspark::engine
