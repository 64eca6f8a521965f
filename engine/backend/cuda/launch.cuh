// CudaOps::Launch: a kernel launch queued now or, while the rank's thread records a step for CUDA
// graphs (cuda_ops.h), recorded with its signature. Included by the .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/graph_planner.h"

namespace pdspark::engine::backend {

// A kernel parameter's part of a launch's signature. Structs with padding or floating-point
// fields have their own overloads (found by argument-dependent lookup, also in the .cu files).
template <typename T>
void AddParam(LaunchSignature& signature, const T& value) {
  signature.Add(value);
}
inline void AddParam(LaunchSignature& signature, const HcShape& s) {
  signature.Add(s.hc);
  signature.Add(s.dim);
  signature.Add(s.sinkhorn_iters);
  signature.Add(s.hc_eps);
  signature.Add(s.norm_eps);
}
inline void AddParam(LaunchSignature& signature, const kernels::WeightMatrix& w) {
  signature.Add(w.format);
  signature.Add(w.data);
  signature.Add(w.row_stride);
  signature.Add(w.row0);
  signature.Add(w.col0);
  signature.Add(w.rows);
  signature.Add(w.cols);
  signature.Add(w.scales);
  signature.Add(w.scale_stride);
}

template <typename... Params, typename... Args>
void CudaOps::Launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block,
                     size_t shared_bytes, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  using Values = std::tuple<std::decay_t<Params>...>;
  Values values(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
  auto work = [this, what, kernel, grid, block, shared_bytes, values] {
    std::apply([&](const auto&... v) { kernel<<<grid, block, shared_bytes, stream_>>>(v...); },
               values);
    Check(cudaGetLastError(), what);
  };
  if (!recording()) {  // queued now, without the recording's costs
    work();
    launches_run_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  LaunchSignature signature;
  signature.Add(reinterpret_cast<std::uintptr_t>(kernel));
  for (const unsigned d : {grid.x, grid.y, grid.z, block.x, block.y, block.z}) signature.Add(d);
  signature.Add(shared_bytes);
  std::apply([&](const auto&... v) { (AddParam(signature, v), ...); }, values);
  Enqueue(signature, std::move(work));
}

}  // namespace pdspark::engine::backend
