// RMSNorm on device memory: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight.
#pragma once

#include "common/base/status.h"

namespace pdspark::cuda {

// All pointers are device pointers; `stream` is a cudaStream_t (void* keeps CUDA out of headers).
Status RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps,
               void* stream = nullptr);

}  // namespace pdspark::cuda
