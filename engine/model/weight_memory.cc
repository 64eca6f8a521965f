#include "engine/model/weight_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

namespace pdspark::engine {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kArenaBytes = size_t{32} << 20;
constexpr size_t kSmallBytes = size_t{64} << 10;  // below this, the ordinary heap
constexpr size_t kAlign = 64;

std::atomic<bool> huge_pages{true};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A 2 MiB-aligned mapping; matrices are carved from it in order and it is unmapped when the last
// one is freed (weights live as long as the model, so holes are rare and short-lived; a model
// unloaded gives all of its memory back).
struct Arena {
  char* base = nullptr;
  size_t size = 0, used = 0, live = 0;
  bool Contains(const void* p) const {
    return p >= base && static_cast<const char*>(p) < base + size;
  }
};

class ArenaPool {
 public:
  void* Allocate(size_t bytes) {
    bytes = RoundUp(bytes, kAlign);
    std::lock_guard lock(mu_);
    if (arenas_.empty() || arenas_.back().used + bytes > arenas_.back().size) {
      Arena fresh;
      fresh.size = std::max(kArenaBytes, RoundUp(bytes, kHugePage));
      fresh.base = MapAligned(fresh.size);
      if (!fresh.base) throw std::bad_alloc();
      arenas_.push_back(fresh);
      mapped_ += fresh.size;
    }
    Arena& a = arenas_.back();
    void* p = a.base + a.used;
    a.used += bytes;
    a.live += bytes;
    return p;
  }

  void Free(void* p, size_t bytes) {
    bytes = RoundUp(bytes, kAlign);
    std::lock_guard lock(mu_);
    auto it =
        std::find_if(arenas_.begin(), arenas_.end(), [p](const Arena& a) { return a.Contains(p); });
    if (it == arenas_.end()) return;  // not ours: cannot happen through WeightAllocator
    it->live -= bytes;
    if (it->live > 0) return;
    munmap(it->base, it->size);
    mapped_ -= it->size;
    arenas_.erase(it);
  }

  size_t mapped() {
    std::lock_guard lock(mu_);
    return mapped_;
  }

 private:
  // mmap returns 4 KiB alignment: map one huge page more and trim both ends.
  static char* MapAligned(size_t size) {
    void* raw =
        mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = RoundUp(start, kHugePage);
    if (aligned > start) munmap(raw, aligned - start);
    const size_t tail = start + size + kHugePage - (aligned + size);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
    auto* base = reinterpret_cast<char*>(aligned);
#ifdef MADV_HUGEPAGE
    // Advice only: a kernel without THP ignores it.
    if (huge_pages.load(std::memory_order_relaxed)) madvise(base, size, MADV_HUGEPAGE);
#endif
    return base;
  }

  std::mutex mu_;
  std::vector<Arena> arenas_;  // the last one is being filled
  size_t mapped_ = 0;
};

ArenaPool& Pool() {
  static ArenaPool* pool = new ArenaPool();  // never destroyed: weights may outlive statics
  return *pool;
}

}  // namespace

void* AllocateWeightBytes(size_t bytes) {
  if (bytes < kSmallBytes) return ::operator new(bytes);
  return Pool().Allocate(bytes);
}

void FreeWeightBytes(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kSmallBytes) {
    ::operator delete(p);
    return;
  }
  Pool().Free(p, bytes);
}

size_t WeightArenaBytes() { return Pool().mapped(); }

void SetWeightHugePages(bool enabled) { huge_pages = enabled; }

}  // namespace pdspark::engine
