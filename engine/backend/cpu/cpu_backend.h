// The CPU backend: a rank's kernels run on its compute threads (kernels/cpu/thread_pool.h, held
// by the parallel::RankRunner), in host memory, with the in-process communicator.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/parallel/rank_runner.h"

namespace pdspark::engine::backend {

class CpuBackend : public Backend {
 public:
  // pool: the rank's compute threads (null: the caller's thread); comm: null for one rank.
  CpuBackend(kernels::cpu::ThreadPool* pool, parallel::Communicator* comm)
      : ops_(pool), comm_(comm) {}

  Device device() const override { return Device::kCpu; }
  Ops& ops() override { return ops_; }
  std::unique_ptr<Timer> NewTimer() const override;
  Status Synchronize() override { return absl::OkStatus(); }
  parallel::Communicator* comm() const override { return comm_; }
  void* Allocate(size_t bytes) override;
  void Free(void* p) override;
  // MemAvailable of /proc/meminfo, capped by this process's cgroup limit when it has one.
  int64_t FreeMemoryBytes() const override;

 private:
  CpuOps ops_;
  parallel::Communicator* comm_;
};

// One CpuBackend per rank of `runner`, over its threads and communicators.
std::vector<std::unique_ptr<Backend>> MakeCpuBackends(const parallel::RankRunner& runner);

}  // namespace pdspark::engine::backend
