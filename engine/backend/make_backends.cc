#include "engine/backend/make_backends.h"

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#ifdef PDSPARK_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace pdspark::engine::backend {

StatusOr<Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("--device must be cpu or cuda, got '", name, "'"));
}

StatusOr<std::vector<std::unique_ptr<Backend>>> MakeBackends(Device device,
                                                             const parallel::RankRunner& runner,
                                                             bool fast_kernels, bool cuda_graphs) {
  if (device == Device::kCpu) {
    std::vector<std::unique_ptr<Backend>> backends = MakeCpuBackends(runner);
    for (auto& rank : backends) static_cast<CpuOps&>(rank->ops()).set_fast_kernels(fast_kernels);
    return backends;
  }
#ifdef PDSPARK_HAVE_CUDA
  ASSIGN_OR_RETURN(auto cuda, CudaBackend::CreateAll(runner.world_size()));
  std::vector<std::unique_ptr<Backend>> backends;
  for (auto& rank : cuda) {
    static_cast<CudaOps&>(rank->ops()).set_fast_kernels(fast_kernels);
    static_cast<CudaOps&>(rank->ops()).set_cuda_graphs(cuda_graphs);
    backends.push_back(std::move(rank));
  }
  return backends;
#else
  (void)cuda_graphs;
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA backend (nvcc was not found when it was "
      "configured): install the CUDA toolkit under /usr/local/cuda and rebuild, or use --device "
      "cpu");
#endif
}

}  // namespace pdspark::engine::backend
