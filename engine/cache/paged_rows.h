// A growable array of fixed-size rows stored in pages of the KV pool, one cache group of one
// sequence (fp32 values, or FP8 KV rows: Row gives the bytes, Floats the fp32 view). Rows are
// addressed by their logical index (token position or compressed-entry index); the block table maps
// index / rows_per_page to a page id. Whole pages that fall below the retention point can be
// released, so a sliding-window group keeps O(window) memory while its indices keep counting from
// 0. Append needs a free page every rows_per_page rows: callers check PagesToGrow against the pool
// first (SequenceState::PagesToGrow, Model::Step). Pages can be shared with a fork (the prefix
// cache): appending into a shared page copies it first, so a fork never sees another's rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "engine/cache/kv_pool.h"
#include "kernels/cpu/fp8_kv_row.h"

namespace pdspark::engine {

class PagedRows {
 public:
  // `fp8`: the rows are FP8 KV rows of this format (head_dim 0: fp32 rows).
  explicit PagedRows(PageGroup* group, kernels::cpu::Fp8KvRow fp8 = {});
  ~PagedRows();
  PagedRows(PagedRows&& other) noexcept;
  PagedRows& operator=(PagedRows&&) = delete;
  PagedRows(const PagedRows&) = delete;

  int64_t size() const { return size_; }
  int64_t row_bytes() const { return group_->row_bytes(); }
  int64_t rows_per_page() const { return group_->rows_per_page(); }
  // The lowest row still stored (rows below it were released).
  int64_t first_row() const { return first_block_ * rows_per_page(); }
  // The page ids holding rows [first_row(), size()), in order.
  const std::vector<int32_t>& block_table() const { return pages_; }

  // Pages Append needs to reach `size` rows (a shared page it would write into counts: it is
  // copied first).
  int64_t PagesToGrow(int64_t size) const;
  // A copy that shares every page with this one (no row is copied), held by `holder`; either
  // side copies a shared page before appending to it. With `own_last_page` the copy takes a
  // copy of a partly filled last page instead, so this side keeps appending to a page nobody
  // else holds (a prefill worker's transfer reads the pages this side writes); fails like
  // Assign when the pool has no page for it.
  StatusOr<PagedRows> Fork(PageHolder holder, bool own_last_page = false);
  // Whose pages these are (the pool counts pages only the prefix cache holds); set while empty.
  void HoldFor(PageHolder holder) { holder_ = holder; }
  // The next row; its page must be available (see PagesToGrow).
  char* Append();
  char* Row(int64_t row) { return RowIn(row); }
  const char* Row(int64_t row) const { return RowIn(row); }
  // The group's row encoding (FP8 KV rows when fp8().head_dim > 0, else fp32): the model
  // writes rows through its backend (Ops::WriteCacheRows).
  const kernels::cpu::Fp8KvRow& fp8() const { return fp8_; }
  // Append and Row for a group of fp32 rows.
  float* AppendFloats() { return reinterpret_cast<float*>(Append()); }
  float* Floats(int64_t row) { return reinterpret_cast<float*>(RowIn(row)); }
  const float* Floats(int64_t row) const { return reinterpret_cast<const float*>(RowIn(row)); }

  // Drops rows >= size (speculation rollback); frees blocks left empty.
  void Truncate(int64_t size);
  // Frees every block whose rows are all below `row`.
  void ReleaseBelow(int64_t row);
  void Clear();

  // The pool whose pages hold the rows (its copies read and write them from the host).
  const KvPool& pool() const { return group_->pool(); }
  // fn(row, bytes, count) for each run of consecutive rows of [begin, end) that one page holds,
  // in order: what one copy can move.
  template <typename Fn>
  void ForEachPageRun(int64_t begin, int64_t end, Fn&& fn) const {
    const int64_t per_page = rows_per_page();
    for (int64_t r = begin; r < end;) {
      const int64_t n = std::min(end - r, per_page - r % per_page);
      fn(r, RowIn(r), n);
      r += n;
    }
  }

  int64_t bytes() const {
    return static_cast<int64_t>(pages_.size()) * group_->pool().page_bytes();
  }

  // Serialised as: first_row, size, then rows [first_row, size) as stored.
  void AppendTo(std::string& out) const;
  // Reads what AppendTo wrote, advancing `offset`.
  Status ReadFrom(const std::string& in, size_t& offset);
  // Replaces the contents with rows [first, size), copied from `rows` (as stored), laid out in
  // pages as if the rows below `first` had been appended and released. Fails, leaving the
  // group empty, when the pool has too few free pages.
  Status Assign(int64_t first, int64_t size, const char* rows);
  // Replaces the contents with `size` rows of unspecified values (a fixed-size ring's storage).
  // Fails like Assign.
  Status Resize(int64_t size) { return Assign(0, size, nullptr); }
  // Adds rows up to `size`, of unspecified values, in pages of their own (a KV transfer writes
  // them). The rows held must end on a page boundary, so no page is shared with what is added.
  // Fails like Assign, keeping the pages it took (Clear returns them).
  Status Extend(int64_t size);

 private:
  char* RowIn(int64_t row) const;
  // Appends `count` fresh pages to the table; ResourceExhausted (the pages taken so far kept)
  // when the pool runs out.
  Status AllocatePages(int64_t count);
  // Gives the page at pages_[index] to this group alone (a copy of its first `rows` rows) when
  // another holder shares it.
  void Unshare(size_t index, int64_t rows);

  PageGroup* group_;
  kernels::cpu::Fp8KvRow fp8_;
  std::vector<int32_t> pages_;
  int64_t first_block_ = 0;  // logical index of pages_.front()
  int64_t size_ = 0;
  PageHolder holder_ = PageHolder::kRequest;
  bool forked_ = false;  // pages may be shared: check before writing
};

}  // namespace pdspark::engine
