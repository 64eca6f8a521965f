// Large host blocks the CPU backend's callers freed, kept for the next allocation of about the
// same size instead of going back to the operating system.
//
// Why: a step allocates and frees the same large activation buffers layer after layer and step
// after step. glibc serves blocks above its mmap threshold (at most 32 MiB) with fresh mappings
// and unmaps them on free, so every such buffer came back as new pages that the kernel faults in
// and zeroes on first touch: a third of a 2048-token prefill's time (docs/perf.md).
//
// Bounded: at most `capacity` bytes are kept, the least recently freed going first, and Release
// hands them all back (the serving engine calls it when it goes idle, so an idle worker's
// resident memory is its state, not its last step's peak). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>

namespace pdspark::engine::backend {

class BlockCache {
 public:
  // Blocks below this size are left to malloc, which keeps small freed chunks in its bins.
  static constexpr size_t kMinBlockBytes = size_t{64} << 10;

  // free_block(block) returns a block to the system.
  BlockCache(size_t capacity, void (*free_block)(void*))
      : capacity_(capacity), free_block_(free_block) {}
  ~BlockCache() { Release(); }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A kept block of at least `bytes` and at most a quarter more, or null when there is none.
  void* Take(size_t bytes);
  // Keeps `block` of `bytes`, dropping the oldest kept blocks when over capacity; frees it
  // at once when it is too small or too large to keep.
  void Put(void* block, size_t bytes);
  // Frees every kept block.
  void Release();
  size_t cached_bytes() const;

 private:
  struct Kept {
    void* block;
    size_t bytes;
  };
  using Order = std::list<Kept>;  // oldest first
  // Frees the oldest kept blocks until at most `limit` bytes are kept; under the lock.
  void ShrinkTo(size_t limit);

  const size_t capacity_;
  void (*const free_block_)(void*);
  mutable std::mutex mutex_;
  Order order_;
  std::multimap<size_t, Order::iterator> by_size_;
  size_t cached_bytes_ = 0;
};

}  // namespace pdspark::engine::backend
