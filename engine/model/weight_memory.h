// Memory for weight matrices, backed by transparent huge pages where the kernel allows them.
//
// Why: a decode step streams every active weight once. With 4 KiB pages the tiny model's 36 MiB
// span about 9000 pages, far more than the TLB covers, so every step also pays page walks and
// its speed depends on where the allocator happened to put each matrix (docs/perf.md, "Few-rows
// GEMM kernel and weights in huge pages"). Matrices of 64 KiB and more are therefore carved
// from 2 MiB-aligned arenas marked madvise(MADV_HUGEPAGE), which the kernel backs with 2 MiB
// pages when /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always" (with
// "never" they are ordinary pages and nothing else changes). Smaller ones come from the
// ordinary heap.
#pragma once

#include <cstddef>
#include <vector>

namespace pdspark::engine {

// Bytes from a huge-page arena (at least 64-byte aligned), or from operator new below 64 KiB.
void* AllocateWeightBytes(size_t bytes);
// Returns what AllocateWeightBytes(bytes) gave; an arena is unmapped once nothing in it is live.
void FreeWeightBytes(void* p, size_t bytes) noexcept;
// Bytes currently mapped for arenas (tests and the load log line).
size_t WeightArenaBytes();
// Process-wide switch (default on): off leaves arenas created from now on with ordinary pages.
// For benchmarks that compare the two in one run (pdspark_model_bench --variants).
void SetWeightHugePages(bool enabled);

template <class T>
struct WeightAllocator {
  using value_type = T;
  WeightAllocator() = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(AllocateWeightBytes(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { FreeWeightBytes(p, n * sizeof(T)); }
  friend bool operator==(const WeightAllocator&, const WeightAllocator&) { return true; }
};

using WeightVector = std::vector<float, WeightAllocator<float>>;

}  // namespace pdspark::engine
