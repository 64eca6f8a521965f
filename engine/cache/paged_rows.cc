#include "engine/cache/paged_rows.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::engine {

PagedRows::PagedRows(PageGroup* group, kernels::cpu::Fp8KvRow fp8) : group_(group), fp8_(fp8) {}

PagedRows::~PagedRows() { Clear(); }

PagedRows::PagedRows(PagedRows&& other) noexcept
    : group_(other.group_),
      fp8_(other.fp8_),
      pages_(std::move(other.pages_)),
      first_block_(other.first_block_),
      size_(other.size_),
      holder_(other.holder_),
      forked_(other.forked_) {
  other.pages_.clear();
  other.size_ = 0;
  other.first_block_ = 0;
}

int64_t PagedRows::PagesToGrow(int64_t size) const {
  const int64_t rows = rows_per_page();
  // The page Append starts next: after the table, or (empty table) the one holding size_.
  const int64_t next =
      pages_.empty() ? size_ / rows : first_block_ + static_cast<int64_t>(pages_.size());
  int64_t pages = std::max<int64_t>(0, (size + rows - 1) / rows - next);
  const int64_t index = size_ / rows - first_block_;
  if (forked_ && size > size_ && index >= 0 && index < static_cast<int64_t>(pages_.size()) &&
      group_->IsShared(pages_[index])) {
    ++pages;  // the page the next row goes to is copied first
  }
  return pages;
}

StatusOr<PagedRows> PagedRows::Fork(PageHolder holder, bool own_last_page) {
  PagedRows fork(group_, fp8_);
  fork.holder_ = holder;
  fork.pages_ = pages_;
  fork.first_block_ = first_block_;
  fork.size_ = size_;
  const int64_t partial_rows = size_ % rows_per_page();
  const bool copy_last =
      own_last_page && partial_rows > 0 && !pages_.empty() &&
      (size_ - 1) / rows_per_page() - first_block_ == static_cast<int64_t>(pages_.size()) - 1;
  if (copy_last) {
    const int32_t page = group_->Allocate(holder);
    if (page == kNoPage) {
      fork.pages_.clear();
      return absl::ResourceExhaustedError(
          absl::StrCat("KV pool full: no page to fork cache group ", group_->name()));
    }
    pool().CopyBytes(group_->Row(page, 0), group_->Row(pages_.back(), 0),
                     partial_rows * row_bytes());
    fork.pages_.back() = page;
  }
  for (size_t i = 0; i + (copy_last ? 1 : 0) < pages_.size(); ++i) group_->Share(pages_[i], holder);
  fork.forked_ = true;
  // A prefix-cache entry is forked from several threads (the engine's lookups, a decode worker's
  // reservations); it was marked when it was made, so it is only read here.
  if (!forked_) forked_ = true;
  return fork;
}

void PagedRows::Unshare(size_t index, int64_t rows) {
  if (!forked_ || !group_->IsShared(pages_[index])) return;
  const int32_t page = group_->Allocate(holder_);
  if (page == kNoPage) {
    LOG_ERROR(
        "KV pool exhausted copying a shared page (cache group {}): PagesToGrow was not "
        "checked",
        group_->name());
    std::abort();
  }
  pool().CopyBytes(group_->Row(page, 0), group_->Row(pages_[index], 0), rows * row_bytes());
  group_->Free(pages_[index], holder_);
  pages_[index] = page;
}

char* PagedRows::Append() {
  const int64_t rows = rows_per_page();
  const int64_t block = size_ / rows;
  if (block - first_block_ >= static_cast<int64_t>(pages_.size())) {
    const int32_t page = group_->Allocate(holder_);
    if (page == kNoPage) {
      // Model::Step and SequenceState::RestoreRows check PagesToGrow first: a bug, not load.
      LOG_ERROR("KV pool exhausted inside a step (cache group {}): PagesToGrow was not checked",
                group_->name());
      std::abort();
    }
    if (pages_.empty()) first_block_ = block;
    pages_.push_back(page);
  } else {
    Unshare(static_cast<size_t>(block - first_block_), size_ % rows);
  }
  ++size_;
  return RowIn(size_ - 1);
}

char* PagedRows::RowIn(int64_t row) const {
  const int64_t rows = rows_per_page();
  return group_->Row(pages_[row / rows - first_block_], row % rows);
}

void PagedRows::Truncate(int64_t size) {
  if (size >= size_) return;
  size_ = size;
  const int64_t rows = rows_per_page();
  const int64_t blocks_needed = (size_ + rows - 1) / rows - first_block_;
  while (static_cast<int64_t>(pages_.size()) > std::max<int64_t>(blocks_needed, 0)) {
    group_->Free(pages_.back(), holder_);
    pages_.pop_back();
  }
  if (pages_.empty()) first_block_ = size_ / rows;
}

void PagedRows::ReleaseBelow(int64_t row) {
  const int64_t rows = rows_per_page();
  // Keep the page holding the last row so Append never re-allocates a released index.
  size_t released = 0;
  while (released < pages_.size() && (first_block_ + 1) * rows <= row &&
         (first_block_ + 1) * rows < size_) {
    group_->Free(pages_[released++], holder_);
    ++first_block_;
  }
  pages_.erase(pages_.begin(), pages_.begin() + static_cast<std::ptrdiff_t>(released));
}

void PagedRows::Clear() {
  for (int32_t page : pages_) group_->Free(page, holder_);
  pages_.clear();
  first_block_ = 0;
  size_ = 0;
}

namespace {

void PutInt(std::string& out, int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

bool GetInt(const std::string& in, size_t& offset, int64_t& v) {
  if (offset + sizeof(v) > in.size()) return false;
  std::memcpy(&v, in.data() + offset, sizeof(v));
  offset += sizeof(v);
  return true;
}

}  // namespace

void PagedRows::AppendTo(std::string& out) const {
  const int64_t first = pages_.empty() ? size_ : std::min(first_row(), size_);
  PutInt(out, first);
  PutInt(out, size_);
  size_t at = out.size();
  out.resize(at + static_cast<size_t>((size_ - first) * row_bytes()));
  ForEachPageRun(first, size_, [&](int64_t, const char* rows, int64_t n) {
    pool().ReadBytes(out.data() + at, rows, n * row_bytes());
    at += n * row_bytes();
  });
}

Status PagedRows::ReadFrom(const std::string& in, size_t& offset) {
  Clear();
  int64_t first = 0, size = 0;
  if (!GetInt(in, offset, first) || !GetInt(in, offset, size) || first < 0 || first > size) {
    return absl::DataLossError("cache snapshot: bad row-group header");
  }
  const size_t row_bytes = this->row_bytes();
  if (offset + (size - first) * row_bytes > in.size()) {
    return absl::DataLossError(absl::StrCat("cache snapshot: truncated rows (need ",
                                            (size - first) * row_bytes, " bytes)"));
  }
  RETURN_IF_ERROR(Assign(first, size, in.data() + offset));
  offset += (size - first) * row_bytes;
  return absl::OkStatus();
}

Status PagedRows::Assign(int64_t first, int64_t size, const char* rows) {
  Clear();
  const int64_t per_page = rows_per_page();
  // The pages as if the rows below `first` had been appended and released.
  first_block_ = (size > first ? first : size) / per_page;
  const int64_t pages = size > first ? (size + per_page - 1) / per_page - first_block_ : 0;
  if (Status st = AllocatePages(pages); !st.ok()) {
    Clear();
    return st;
  }
  size_ = size;
  if (rows == nullptr) return absl::OkStatus();  // Resize: the rows keep what the pages held
  // One copy per page: rows of a page are contiguous on both sides.
  ForEachPageRun(first, size, [&](int64_t, char* page_rows, int64_t n) {
    pool().WriteBytes(page_rows, rows, n * row_bytes());
    rows += n * row_bytes();
  });
  return absl::OkStatus();
}

Status PagedRows::Extend(int64_t size) {
  if (size <= size_) return absl::OkStatus();
  const int64_t per_page = rows_per_page();
  if (size_ % per_page != 0) {
    return absl::InternalError(absl::StrCat(group_->name(), ": extending from row ", size_,
                                            ", inside a page of ", per_page, " rows"));
  }
  if (pages_.empty()) first_block_ = size_ / per_page;
  RETURN_IF_ERROR(AllocatePages((size + per_page - 1) / per_page - size_ / per_page));
  size_ = size;
  return absl::OkStatus();
}

Status PagedRows::AllocatePages(int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const int32_t page = group_->Allocate(holder_);
    if (page == kNoPage) {
      return absl::ResourceExhaustedError(absl::StrCat("KV pool full: ", group_->name(), " needs ",
                                                       count, " pages (--kv-cache-memory-bytes)"));
    }
    pages_.push_back(page);
  }
  return absl::OkStatus();
}

}  // namespace pdspark::engine
