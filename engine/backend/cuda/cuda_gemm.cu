// CudaOps: GEMM on weights in their checkpoint formats, dequantised as they are read, computing
// the CPU kernels' canonical dot (kernels/cpu/quant_gemm.h) exactly: the 16 lanes of a half-warp
// stand for its 16 lane accumulators, lane l summing x[p] * w(j, p) for p = l, l + 16, ... with
// fused multiply-adds in order of p (the last, partial 16 padded with zeros, as the CPU loads
// them), then the fixed tree (l, l+8), (l, l+4), (l, l+2), (l, l+1) by shuffles. So the device
// gives the CPU's bits for every format, slice and batch.
//
// This is the exact path, not the fast one: SIMT fp32, weights re-read once per kRowsPerTile
// rows of x. The fast kernels (CudaOps::set_fast_kernels) take the FP4 problems to a W4A16
// tensor-core GEMM (cuda_w4a16_gemm.cu), checked against this one within a stated bound;
// cuBLASLt FP8 with block scales comes next.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/kernel_gemm.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend {
namespace {

constexpr int kLanes = 16;                        // the canonical dot's lanes: a half-warp
constexpr int kThreads = 256;                     // 16 half-warps: 16 weight rows per block
constexpr int kRowsPerBlock = kThreads / kLanes;  // weight rows (output features) per block
constexpr int kRowsPerTile = 8;                   // rows of x each half-warp accumulates

// One half-warp: output feature j of rows [i0, i0 + rows) of x.
__device__ void CanonicalDots(const GemmCall& c, int64_t i0, int rows, int64_t j, int lane) {
  float acc[kRowsPerTile];
#pragma unroll
  for (int r = 0; r < kRowsPerTile; ++r) acc[r] = 0.0f;
  const int64_t k = c.w.cols, padded = (k + kLanes - 1) / kLanes * kLanes;
  for (int64_t p = lane; p < padded; p += kLanes) {
    const bool present = p < k;
    const float w = present ? c.w.At(j, p) : 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerTile; ++r) {
      if (r < rows) acc[r] = fmaf(present ? c.x[(i0 + r) * c.ldx + p] : 0.0f, w, acc[r]);
    }
  }
  // The canonical tree: every lane of the half-warp takes part in each shuffle.
  constexpr unsigned kAll = 0xFFFFFFFFu;
#pragma unroll
  for (int r = 0; r < kRowsPerTile; ++r) {
    float v = acc[r];
    v = v + __shfl_down_sync(kAll, v, 8, kLanes);
    v = v + __shfl_down_sync(kAll, v, 4, kLanes);
    v = v + __shfl_down_sync(kAll, v, 2, kLanes);
    v = v + __shfl_down_sync(kAll, v, 1, kLanes);
    if (lane == 0 && r < rows) c.y[(i0 + r) * c.ldy + j] = v;
  }
}

// blockIdx.z: the problem; blockIdx.x: a group of kRowsPerBlock weight rows; blockIdx.y: every
// gridDim.y-th tile of kRowsPerTile rows of x. Blocks past a smaller problem's shape have
// nothing to do.
__global__ void GemmKernel(const KernelGemm* problems) {
  const GemmCall c = Resolved(problems[blockIdx.z]);
  const int half_warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + half_warp;
  // A half-warp past the weight rows still computes (on row 0) so that its shuffles have all
  // lanes; it writes nothing. c.m is the same for the whole block.
  const bool writes = j < c.w.rows;
  for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kRowsPerTile; i0 < c.m;
       i0 += static_cast<int64_t>(gridDim.y) * kRowsPerTile) {
    const int rows =
        writes ? static_cast<int>(c.m - i0 < kRowsPerTile ? c.m - i0 : kRowsPerTile) : 0;
    CanonicalDots(c, i0, rows, writes ? j : 0, lane);
  }
}

}  // namespace

void CudaOps::Gemm(const GemmCall& call) { GroupedGemm(std::span<const GemmCall>(&call, 1)); }

void CudaOps::GroupedGemm(std::span<const GemmCall> calls) {
  const cuda::DeviceScope on_device(device_);
  std::vector<KernelGemm> problems;
  for (const GemmCall& c : calls) problems.push_back({c, nullptr});
  RunGemms(problems);
  FreeScratch();  // every path's, queued after the work that reads it
}

void CudaOps::RunGemms(std::span<const KernelGemm> problems) {
  std::vector<KernelGemm> exact, fast;
  for (const KernelGemm& p : problems) {
    const GemmCall& c = p.call;
    if (c.m == 0 || c.w.rows == 0) continue;
    if (fast_kernels_ && W4A16Eligible(c)) {
      fast.push_back(p);
    } else if (!(fast_kernels_ && !p.segment && Fp8LtEligible(c) && Fp8LtGemm(c))) {
      exact.push_back(p);
    }
  }
  if (!fast.empty()) W4A16GroupedGemm(fast);
  if (!exact.empty()) ExactGroupedGemm(exact);
}

dim3 CudaOps::GroupedGrid(std::span<const KernelGemm> problems, int64_t rows_per_block,
                          int64_t m_per_block) {
  int64_t max_rows = 0, max_m = 0;
  for (const KernelGemm& p : problems) {
    max_rows = std::max(max_rows, p.call.w.rows);
    max_m = std::max(max_m, p.call.m);
  }
  const int64_t row_tiles = std::min((max_m + m_per_block - 1) / m_per_block, kMaxRowTiles);
  return dim3(static_cast<unsigned>((max_rows + rows_per_block - 1) / rows_per_block),
              static_cast<unsigned>(std::max<int64_t>(row_tiles, 1)),
              static_cast<unsigned>(problems.size()));
}

void CudaOps::ExactGroupedGemm(std::span<const KernelGemm> problems) {
  const KernelGemm* device_problems = Upload(problems.data(), problems.size());
  if (!ok()) return;
  Launch("GroupedGemm", GemmKernel, GroupedGrid(problems, kRowsPerBlock, kRowsPerTile), kThreads, 0,
         device_problems);
}

}  // namespace pdspark::engine::backend
