#include "engine/cache/kv_pool.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "common/base/logging.h"

namespace pdspark::engine {

PageGroup::PageGroup(KvPool* pool, std::string name, int64_t row_bytes)
    : pool_(pool),
      name_(std::move(name)),
      row_bytes_(row_bytes),
      rows_per_page_(pool->page_bytes() / row_bytes) {
  // PageGeometry sizes pages for the widest row, so this is a bug, never bad input.
  if (rows_per_page_ < 1) {
    LOG_ERROR("cache group {} has rows of {} bytes, wider than a {}-byte page", name_, row_bytes_,
              pool->page_bytes());
    std::abort();
  }
}

int32_t PageGroup::Allocate() {
  std::lock_guard lock(pool_->mutex_);
  if (pool_->free_.empty()) return kNoPage;
  const int32_t page = pool_->free_.back();
  pool_->free_.pop_back();
  ++pages_in_use_;
  const int64_t in_use = pool_->num_pages_ - static_cast<int64_t>(pool_->free_.size());
  pool_->high_water_ = std::max(pool_->high_water_, in_use);
  return page;
}

void PageGroup::Free(int32_t page) {
  std::lock_guard lock(pool_->mutex_);
  --pages_in_use_;
  pool_->free_.push_back(page);
}

char* PageGroup::Row(int32_t page, int64_t index) const {
  return pool_->PageData(page) + index * row_bytes_;
}

int64_t PageGroup::pages_in_use() const {
  std::lock_guard lock(pool_->mutex_);
  return pages_in_use_;
}

KvPool::KvPool(void* memory, int64_t page_bytes, int64_t num_pages)
    : base_(static_cast<char*>(memory)), page_bytes_(page_bytes), num_pages_(num_pages) {
  if (num_pages < 0 || num_pages > std::numeric_limits<int32_t>::max()) {
    LOG_ERROR("KV pool of {} pages: page ids are int32 (KvPoolPages caps the count)", num_pages);
    std::abort();
  }
  free_.reserve(num_pages);
  // Page 0 on top of the stack: a fresh pool hands pages out from the start of the arena.
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

PageGroup& KvPool::ForGroup(const std::string& name, int64_t row_bytes) {
  std::lock_guard lock(mutex_);
  auto& group = groups_[{name, row_bytes}];
  if (!group) group = std::make_unique<PageGroup>(this, name, row_bytes);
  return *group;
}

int64_t KvPool::free_pages() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_.size());
}

int64_t KvPool::pages_in_use() const {
  std::lock_guard lock(mutex_);
  return num_pages_ - static_cast<int64_t>(free_.size());
}

int64_t KvPool::high_water_pages() const {
  std::lock_guard lock(mutex_);
  return high_water_;
}

std::map<std::string, int64_t> KvPool::BytesInUseByGroup() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, int64_t> bytes;
  for (const auto& [key, group] : groups_) bytes[key.first] += group->pages_in_use_ * page_bytes_;
  return bytes;
}

}  // namespace pdspark::engine
