// Fixed-size blocks of fp32 cache rows, handed out to sequences and recycled on free. One pool
// per row width; all sequences of a model share the pools so memory is accounted in one place.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace pdspark::engine {

class BlockPool {
 public:
  BlockPool(int64_t row_width, int64_t rows_per_block);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  float* Allocate();
  void Free(float* block);

  int64_t row_width() const { return row_width_; }
  int64_t rows_per_block() const { return rows_per_block_; }
  int64_t block_bytes() const { return rows_per_block_ * row_width_ * sizeof(float); }
  int64_t blocks_in_use() const;
  int64_t blocks_reserved() const;  // in use + cached free blocks
  int64_t bytes_in_use() const { return blocks_in_use() * block_bytes(); }

 private:
  const int64_t row_width_;
  const int64_t rows_per_block_;
  mutable std::mutex mutex_;
  std::vector<float*> free_;
  int64_t in_use_ = 0;
};

// The pools of one model, one per cache group (CacheGroupSpec::name) and row width, so memory
// is accounted per group; `block_rows` rows per block (default 256: a block of a per-token
// group covers 256 tokens, one of a ratio-r group 256 compressed entries).
class CachePools {
 public:
  explicit CachePools(int64_t block_rows = 256) : block_rows_(block_rows) {}
  BlockPool& ForGroup(const std::string& group, int64_t width);
  int64_t block_rows() const { return block_rows_; }
  int64_t bytes_in_use() const;
  int64_t blocks_in_use() const;
  // Bytes in use per group name.
  std::map<std::string, int64_t> BytesInUseByGroup() const;

 private:
  const int64_t block_rows_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<BlockPool>> pools_;
};

}  // namespace pdspark::engine
