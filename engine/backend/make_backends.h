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
// kCuda, rank r on GPU r. Fails naming why when the device cannot be had: a build without CUDA,
// no GPU, or (for now) more than one rank on CUDA, whose NCCL communicator the model's steps do
// not use yet. `fast_kernels`: the CUDA backend's fast kernels (CudaOps::set_fast_kernels; the
// CPU has only its own).
StatusOr<std::vector<std::unique_ptr<Backend>>> MakeBackends(Device device,
                                                             const parallel::RankRunner& runner,
                                                             bool fast_kernels = false);

}  // namespace pdspark::engine::backend
