#include "engine/backend/cpu/cpu_backend.h"

#include <chrono>
#include <cstdlib>

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

}  // namespace

std::unique_ptr<Timer> CpuBackend::NewTimer() const { return std::make_unique<CpuTimer>(); }

void* CpuBackend::Allocate(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }

void CpuBackend::Free(void* p) { std::free(p); }

std::vector<std::unique_ptr<Backend>> MakeCpuBackends(const parallel::RankRunner& runner) {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int r = 0; r < runner.world_size(); ++r) {
    backends.push_back(std::make_unique<CpuBackend>(runner.pool(r), runner.comm(r)));
  }
  return backends;
}

}  // namespace pdspark::engine::backend
