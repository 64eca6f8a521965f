#include "engine/backend/cpu/cpu_backend.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

namespace pdspark::engine::backend {
namespace {

// The CPU computes synchronously: the wall time between Start and Stop is the work's. Wall
// time, not the calling thread's CPU time, because the work runs on all the rank's threads.
class CpuTimer : public Timer {
 public:
  void Start() override { start_ = std::chrono::steady_clock::now(); }
  double Stop() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The first integer of `path`, or `fallback` when it is missing or not a number ("max").
int64_t ReadInteger(const char* path, int64_t fallback) {
  std::ifstream in(path);
  int64_t value = 0;
  return in >> value ? value : fallback;
}

int64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

std::unique_ptr<Timer> CpuBackend::NewTimer() const { return std::make_unique<CpuTimer>(); }

namespace {

// 64-byte alignment by hand over malloc, the original pointer and the usable size kept just
// below the aligned one. Not aligned_alloc: glibc's memalign splits a larger chunk and frees the
// pieces around the aligned one, and the model's many small per-step buffers then fragment the
// heap until a long-running worker's resident memory creeps up (the soak test saw +10 % over
// three phases).
struct BlockHeader {
  void* base;
  size_t bytes;
};
constexpr size_t kAlign = 64;

BlockHeader& HeaderOf(void* p) { return static_cast<BlockHeader*>(p)[-1]; }

void* AllocateAligned(size_t bytes) {
  void* base = std::malloc(bytes + kAlign + sizeof(BlockHeader));
  if (!base) return nullptr;
  const uintptr_t first = reinterpret_cast<uintptr_t>(base) + sizeof(BlockHeader);
  void* aligned = reinterpret_cast<void*>((first + kAlign - 1) / kAlign * kAlign);
  HeaderOf(aligned) = {base, bytes};
  return aligned;
}

void FreeAligned(void* p) { std::free(HeaderOf(p).base); }

// Whether malloc is set for steps (SetMallocForSteps) rather than glibc's defaults.
std::atomic<bool> malloc_set_for_steps{false};

// Trims the free top of the calling thread's heap (what a kernel's own temporaries left there
// when no kept block was freed into that heap): a free of 64 KiB or more trims it, and with
// glibc's default M_MMAP_THRESHOLD (128 KiB) this block comes from the heap, not from mmap.
void TrimThisThreadsHeapTop() {
  constexpr size_t kTrimmingFreeBytes = size_t{96} << 10;
  void* p = std::malloc(kTrimmingFreeBytes);
  asm volatile("" : : "r"(p) : "memory");  // the allocation is not elided
  std::free(p);
}

}  // namespace

void SetMallocForSteps(bool steps) {
  if (malloc_set_for_steps.exchange(steps) == steps) return;
  // glibc hands the free top of its heap back to the kernel once it exceeds a threshold that
  // follows the largest block freed, and maps larger blocks afresh each time. A step allocates
  // and frees its buffers layer after layer, so each layer's pages came back as new ones: a
  // fault per 4 KiB and the kernel zeroing it (docs/perf.md: prefill at half speed on a VM
  // where faults are expensive). While steps run: blocks up to 32 MiB from the heap, its free
  // top kept up to 1 GiB and grown 64 MiB at a time. Idle: glibc's defaults (mallopt(3)), so
  // what other threads free then goes back as before.
  constexpr int kDefault = 128 * 1024;
  mallopt(M_MMAP_THRESHOLD, steps ? 32 << 20 : kDefault);
  mallopt(M_TRIM_THRESHOLD, steps ? 1 << 30 : kDefault);
  mallopt(M_TOP_PAD, steps ? 64 << 20 : kDefault);
}

CpuBackend::CpuBackend(kernels::cpu::ThreadPool* pool, parallel::Communicator* comm)
    : ops_(pool), comm_(comm), blocks_(kCachedBlockBytes, FreeAligned) {}

void* CpuBackend::Allocate(size_t bytes) {
  if (!malloc_set_for_steps.load(std::memory_order_relaxed)) SetMallocForSteps(true);
  if (void* kept = blocks_.Take(bytes)) return kept;
  return AllocateAligned(bytes);
}

void CpuBackend::Free(void* p) {
  if (p) blocks_.Put(p, HeaderOf(p).bytes);
}

void CpuBackend::ReleaseCachedMemory() {
  // glibc's defaults before the kept blocks go: a free of 64 KiB or more trims the free top of
  // the block's heap beyond M_TRIM_THRESHOLD, and the steps ran on threads with heaps (arenas)
  // of their own, whose top malloc_trim leaves alone (it trims only the main heap's).
  SetMallocForSteps(false);
  blocks_.Release();
  TrimThisThreadsHeapTop();
  // The kept blocks made the heap grow past what one step needs; freed, they leave free pages
  // inside it that glibc keeps resident. Hand those back too: an idle worker's RSS is its state.
  malloc_trim(0);
}

int64_t CpuBackend::FreeMemoryBytes() const {
  constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  const int64_t limit = ReadInteger("/sys/fs/cgroup/memory.max", kNoLimit);
  const int64_t used = ReadInteger("/sys/fs/cgroup/memory.current", 0);
  return std::min(MemAvailableBytes(),
                  limit == kNoLimit ? kNoLimit : std::max<int64_t>(0, limit - used));
}

std::vector<std::unique_ptr<Backend>> MakeCpuBackends(const parallel::RankRunner& runner) {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int r = 0; r < runner.world_size(); ++r) {
    backends.push_back(std::make_unique<CpuBackend>(runner.pool(r), runner.comm(r)));
  }
  return backends;
}

}  // namespace pdspark::engine::backend
