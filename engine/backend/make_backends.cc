#include "engine/backend/make_backends.h"

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
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
                                                             [[maybe_unused]] bool fast_kernels) {
  if (device == Device::kCpu) return MakeCpuBackends(runner);
#ifdef PDSPARK_HAVE_CUDA
  if (runner.world_size() > 1) {
    return absl::UnimplementedError(
        absl::StrCat("--device cuda runs one rank for now, got --tensor-parallel-size ",
                     runner.world_size(), ": use --tensor-parallel-size 1"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> cuda, CudaBackend::Create(0, nullptr));
  static_cast<CudaOps&>(cuda->ops()).set_fast_kernels(fast_kernels);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(cuda));
  return backends;
#else
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA backend (nvcc was not found when it was "
      "configured): install the CUDA toolkit under /usr/local/cuda and rebuild, or use --device "
      "cpu");
#endif
}

}  // namespace pdspark::engine::backend
