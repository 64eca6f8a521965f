#include "engine/cache/block_pool.h"

#include <cstring>

namespace pdspark::engine {

BlockPool::BlockPool(int64_t row_width, int64_t rows_per_block)
    : row_width_(row_width), rows_per_block_(rows_per_block) {}

BlockPool::~BlockPool() {
  for (float* block : free_) delete[] block;
}

float* BlockPool::Allocate() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++in_use_;
  if (!free_.empty()) {
    float* block = free_.back();
    free_.pop_back();
    return block;
  }
  return new float[rows_per_block_ * row_width_]();
}

void BlockPool::Free(float* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_use_;
  free_.push_back(block);
}

int64_t BlockPool::blocks_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

int64_t BlockPool::blocks_reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_ + static_cast<int64_t>(free_.size());
}

BlockPool& CachePools::ForGroup(const std::string& group, int64_t width) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& pool = pools_[{group, width}];
  if (!pool) pool = std::make_unique<BlockPool>(width, block_rows_);
  return *pool;
}

int64_t CachePools::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (const auto& [width, pool] : pools_) total += pool->bytes_in_use();
  return total;
}

int64_t CachePools::blocks_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (const auto& [width, pool] : pools_) total += pool->blocks_in_use();
  return total;
}

std::map<std::string, int64_t> CachePools::BytesInUseByGroup() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, int64_t> bytes;
  for (const auto& [key, pool] : pools_) bytes[key.first] += pool->bytes_in_use();
  return bytes;
}

}  // namespace pdspark::engine
