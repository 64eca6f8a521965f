// The product a GEMM kernel's block works on (KernelGemm, cuda_ops.h), its segment resolved on
// the device.
#pragma once

#include "engine/backend/cuda/cuda_ops.h"

namespace pdspark::engine::backend {

__device__ inline GemmCall Resolved(const KernelGemm& problem) {
  GemmCall c = problem.call;
  if (problem.segment) {
    const int64_t first = problem.segment[0];
    c.x += first * c.ldx;
    c.y += first * c.ldy;
    c.m = problem.segment[1] - first;
  }
  return c;
}

}  // namespace pdspark::engine::backend
