// One-dimensional launches of the element-wise kernels: a grid sized to the work (capped, the
// kernels loop over the rest) and the grid-stride loop they run.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pdspark::engine::backend {

inline constexpr int kGridThreads = 256;
inline constexpr int64_t kMaxGridBlocks = 1 << 16;

// Blocks of `threads` for n items: at least one, at most kMaxGridBlocks.
inline unsigned BlocksFor(int64_t n, int threads = kGridThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxGridBlocks));
}

}  // namespace pdspark::engine::backend

// A grid-stride loop index over [0, n).
#define PDSPARK_GRID_LOOP(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
