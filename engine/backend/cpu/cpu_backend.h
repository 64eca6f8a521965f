// The CPU backend: a rank's kernels run on its compute threads (kernels/cpu/thread_pool.h, held
// by the parallel::RankRunner), in host memory, with the in-process communicator.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/block_cache.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/parallel/rank_runner.h"

namespace pdspark::engine::backend {

class CpuBackend : public Backend {
 public:
  // pool: the rank's compute threads (null: the caller's thread); comm: null for one rank.
  CpuBackend(kernels::cpu::ThreadPool* pool, parallel::Communicator* comm);

  Device device() const override { return Device::kCpu; }
  Ops& ops() override { return ops_; }
  std::unique_ptr<Timer> NewTimer() const override;
  Status Synchronize() override { return absl::OkStatus(); }
  parallel::Communicator* comm() const override { return comm_; }
  // Large blocks freed are kept for reuse (block_cache.h), up to kCachedBlockBytes; malloc is set
  // for steps (SetMallocForSteps).
  void* Allocate(size_t bytes) override;
  void Free(void* p) override;
  void ReleaseCachedMemory() override;
  size_t cached_bytes() const { return blocks_.cached_bytes(); }
  // MemAvailable of /proc/meminfo, capped by this process's cgroup limit when it has one.
  int64_t FreeMemoryBytes() const override;

 private:
  // What a rank keeps of freed blocks: a 4096-token prefill step of the 263M synthetic model
  // runs as fast with 4 GiB (docs/perf.md).
  static constexpr size_t kCachedBlockBytes = size_t{512} << 20;

  CpuOps ops_;
  parallel::Communicator* comm_;
  BlockCache blocks_;
};

// Sets glibc's malloc (process-wide) to keep freed heap pages mapped while steps run, so that
// steps reuse them instead of faulting fresh ones in, or back to its defaults. A CpuBackend's
// first allocation after idling sets it for steps; ReleaseCachedMemory (the engine going idle)
// sets the defaults back and trims.
void SetMallocForSteps(bool steps);

// One CpuBackend per rank of `runner`, over its threads and communicators.
std::vector<std::unique_ptr<Backend>> MakeCpuBackends(const parallel::RankRunner& runner);

}  // namespace pdspark::engine::backend
