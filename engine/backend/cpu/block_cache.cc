#include "engine/backend/cpu/block_cache.h"

namespace pdspark::engine::backend {

void* BlockCache::Take(size_t bytes) {
  if (bytes < kMinBlockBytes) return nullptr;
  std::lock_guard lock(mutex_);
  const auto fit = by_size_.lower_bound(bytes);
  if (fit == by_size_.end() || fit->first > bytes + bytes / 4) return nullptr;
  const Kept kept = *fit->second;
  order_.erase(fit->second);
  by_size_.erase(fit);
  cached_bytes_ -= kept.bytes;
  return kept.block;
}

void BlockCache::Put(void* block, size_t bytes) {
  if (bytes < kMinBlockBytes || bytes > capacity_) return free_block_(block);
  std::lock_guard lock(mutex_);
  ShrinkTo(capacity_ - bytes);
  order_.push_back({block, bytes});
  by_size_.emplace(bytes, std::prev(order_.end()));
  cached_bytes_ += bytes;
}

void BlockCache::Release() {
  std::lock_guard lock(mutex_);
  ShrinkTo(0);
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

void BlockCache::ShrinkTo(size_t limit) {
  while (cached_bytes_ > limit) {
    const Kept oldest = order_.front();
    // The entry of the oldest block among those of its size.
    auto it = by_size_.lower_bound(oldest.bytes);
    while (it->second != order_.begin()) ++it;
    by_size_.erase(it);
    order_.pop_front();
    cached_bytes_ -= oldest.bytes;
    free_block_(oldest.block);
  }
}

}  // namespace pdspark::engine::backend
