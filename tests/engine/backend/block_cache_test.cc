// BlockCache and the CPU backend's use of it: a freed large block comes back for an allocation
// of about its size (and a Buffer on it starts as zeros all the same), the cache stays within
// its capacity by dropping the oldest blocks, small and oversized blocks are not kept, and
// Release hands everything back; the heap's freed pages stay mapped until the engine idles, and
// then go back, the free top of a step thread's own heap included.
#include "engine/backend/cpu/block_cache.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/buffer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace pdspark::engine::backend {
namespace {

constexpr size_t kKiB = 1024;

// What the cache under test freed.
std::set<void*>& Freed() {
  static std::set<void*> freed;
  return freed;
}
void RecordFree(void* block) { Freed().insert(block); }

// Distinct fake block addresses (never dereferenced).
void* Block(uintptr_t i) { return reinterpret_cast<void*>(i * 4096); }

TEST(BlockCacheTest, GivesBackAKeptBlockOfAboutTheSizeAsked) {
  Freed().clear();
  BlockCache cache(1024 * kKiB, RecordFree);
  cache.Put(Block(1), 100 * kKiB);
  EXPECT_EQ(cache.cached_bytes(), 100 * kKiB);
  EXPECT_EQ(cache.Take(101 * kKiB), nullptr);  // too small
  EXPECT_EQ(cache.Take(80 * kKiB), Block(1));  // 100 <= 80 * 5/4
  EXPECT_EQ(cache.Take(80 * kKiB), nullptr);   // taken once
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.Put(Block(2), 100 * kKiB);
  EXPECT_EQ(cache.Take(79 * kKiB), nullptr);  // 100 > 79 * 5/4: too much waste
  EXPECT_TRUE(Freed().empty());
}

TEST(BlockCacheTest, DropsTheOldestBlocksBeyondItsCapacity) {
  Freed().clear();
  BlockCache cache(300 * kKiB, RecordFree);
  cache.Put(Block(1), 100 * kKiB);
  cache.Put(Block(2), 100 * kKiB);
  cache.Put(Block(3), 100 * kKiB);
  EXPECT_TRUE(Freed().empty());
  cache.Put(Block(4), 150 * kKiB);  // 450 KiB: the two oldest go
  EXPECT_EQ(Freed(), (std::set<void*>{Block(1), Block(2)}));
  EXPECT_EQ(cache.cached_bytes(), 250 * kKiB);
  EXPECT_EQ(cache.Take(100 * kKiB), Block(3));
  EXPECT_EQ(cache.Take(150 * kKiB), Block(4));
}

TEST(BlockCacheTest, FreesSmallAndOversizedBlocksAtOnceAndReleasesTheRest) {
  Freed().clear();
  BlockCache cache(300 * kKiB, RecordFree);
  cache.Put(Block(1), BlockCache::kMinBlockBytes - 1);
  cache.Put(Block(2), 301 * kKiB);
  EXPECT_EQ(Freed(), (std::set<void*>{Block(1), Block(2)}));
  EXPECT_EQ(cache.Take(BlockCache::kMinBlockBytes - 1), nullptr);
  cache.Put(Block(3), 100 * kKiB);
  cache.Put(Block(4), 100 * kKiB);
  cache.Release();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(Freed().size(), 4u);
  EXPECT_EQ(cache.Take(100 * kKiB), nullptr);
}

TEST(CpuBackendTest, ReusesALargeFreedBlockWhichABufferStillStartsAsZeros) {
  CpuBackend backend(nullptr, nullptr);
  const int64_t n = 1 << 20;  // 4 MiB of floats
  const float* first = nullptr;
  {
    Buffer<float> a(backend, n);
    first = a.data();
    std::vector<float> ones(n, 1.0f);
    backend.ops().CopyToDevice(a.data(), ones.data(), n * sizeof(float));
  }
  EXPECT_EQ(backend.cached_bytes(), n * sizeof(float));
  Buffer<float> b(backend, n);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b.ToHost(), std::vector<float>(n, 0.0f));
  EXPECT_EQ(backend.cached_bytes(), 0u);
}

TEST(CpuBackendTest, ReleaseCachedMemoryHandsTheBlocksBack) {
  CpuBackend backend(nullptr, nullptr);
  { Buffer<float> a(backend, 1 << 20); }
  EXPECT_GT(backend.cached_bytes(), 0u);
  backend.ReleaseCachedMemory();
  EXPECT_EQ(backend.cached_bytes(), 0u);
}

// Minor page faults of this process so far.
long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// What a step does to malloc outside the block cache: three 12 MiB blocks allocated, written
// and freed.
void StepLikeAllocations() {
  constexpr size_t kBytes = size_t{12} << 20;
  void* blocks[3];
  for (void*& p : blocks) {
    p = std::malloc(kBytes);
    std::memset(p, 1, kBytes);
    asm volatile("" : : "r"(p) : "memory");  // the writes happen
  }
  for (void* p : blocks) std::free(p);
}

// glibc's defaults give those pages back to the kernel after every step (the freed top of the
// heap beyond twice the largest block), so each step faulted 9216 fresh pages in. While a CPU
// backend allocates for steps they stay; once the engine idles, the defaults are back.
TEST(CpuBackendTest, FreedHeapPagesStayMappedWhileStepsRun) {
  CpuBackend backend(nullptr, nullptr);
  backend.Free(backend.Allocate(64));  // a step's first allocation
  StepLikeAllocations();
  const long before = MinorFaults();
  for (int i = 0; i < 5; ++i) StepLikeAllocations();
  EXPECT_LT(MinorFaults() - before, 1000);
  backend.ReleaseCachedMemory();  // idle: trimmed, and glibc's defaults
  StepLikeAllocations();
  const long idle = MinorFaults();
  StepLikeAllocations();
  EXPECT_GT(MinorFaults() - idle, 4000);
}

// Resident KiB of this process (VmRSS of /proc/self/status).
long ResidentKib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") return status >> value ? value : 0;
    status.ignore(1 << 10, '\n');
  }
  return 0;
}

// The engine's steps run on threads other than main, in glibc arenas of their own, whose free top
// malloc_trim leaves resident (it trims only the main heap's top). The decode worker's idle RSS
// once kept a step's 18 MB peak that way until the soak test failed it. Returns how many KiB
// more a step thread leaves resident once its backend idles than before its step: the step
// writes 40 MiB of backend blocks (kept for the next step) when `backend_blocks`, and a kernel's
// own temporaries in any case.
long KibLeftResidentByAStepThread(bool backend_blocks) {
  constexpr size_t kBlock = size_t{1} << 20;
  long before = 0, idle = 0;
  std::thread step_thread([&] {
    CpuBackend backend(nullptr, nullptr);
    backend.Free(backend.Allocate(64));  // a step's first allocation: malloc set for steps
    before = ResidentKib();
    std::vector<void*> blocks;
    for (int i = 0; backend_blocks && i < 40; ++i) {
      blocks.push_back(backend.Allocate(kBlock));
      std::memset(blocks.back(), 1, kBlock);
    }
    for (void* p : blocks) backend.Free(p);
    StepLikeAllocations();
    backend.ReleaseCachedMemory();
    idle = ResidentKib();
  });
  step_thread.join();
  return idle - before;
}

TEST(CpuBackendTest, IdlingHandsBackTheTopOfAStepThreadsHeap) {
  EXPECT_LT(KibLeftResidentByAStepThread(/*backend_blocks=*/true), 8 << 10);
}

TEST(CpuBackendTest, IdlingHandsBackTheTopOfAHeapWithOnlyKernelTemporaries) {
  EXPECT_LT(KibLeftResidentByAStepThread(/*backend_blocks=*/false), 8 << 10);
}

}  // namespace
}  // namespace pdspark::engine::backend
