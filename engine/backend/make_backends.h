// The backends of a model's tensor-parallel ranks on the device it was asked to run on
// (--device): the CPU one, or the CUDA one where this build has it and the machine a GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/parallel/rank_runner.h"

namespace pdspark::engine::backend {

// "cpu" | "cuda".
StatusOr<Device> ParseDevice(const std::string& name);

// One backend per rank of `runner`: CPU backends over its threads and communicators, or, for
// kCuda, rank r on GPU r with an NCCL communicator between the ranks (one thread per GPU: the
// runner's rank threads). Fails naming why when the device cannot be had: a build without CUDA
// (or, for several ranks, without NCCL), or fewer GPUs than ranks. `fast_kernels`: the
// backend's fast kernels (CpuOps::set_fast_kernels, CudaOps::set_fast_kernels), which trade the
// reference's bits for speed within a stated bound. `cuda_graphs`: the CUDA backend replays the
// launches that repeat from step to step from CUDA graphs (CudaOps::set_cuda_graphs; nothing on
// the CPU).
StatusOr<std::vector<std::unique_ptr<Backend>>> MakeBackends(Device device,
                                                             const parallel::RankRunner& runner,
                                                             bool fast_kernels = false,
                                                             bool cuda_graphs = false);

}  // namespace pdspark::engine::backend
