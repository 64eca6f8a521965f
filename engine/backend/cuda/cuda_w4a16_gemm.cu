// CudaOps: the fast path of the FP4 experts' GEMMs, W4A16 on tensor cores (what SGLang and vLLM
// run on Hopper, which has no FP4 tensor cores): each block takes 16 rows of x and 64 weight
// rows, dequantises a 32-column slab of FP4 codes times its E8M0 scale into BF16 (exact: every
// E2M1 value times a power of two fits BF16's 8 bits of mantissa), rounds the slab of x to BF16,
// and multiplies them on the tensor cores (WMMA 16x16x16, fp32 accumulation). All problems of a
// grouped GEMM (a layer's experts) go in one launch.
//
// Only x's rounding to BF16 differs from the exact path: each product loses at most 2^-9 of its
// size, so |y - y_exact| <= 2^-9 * sum_k |x_k w_k| plus fp32 accumulation; the GPU test holds
// it to 2^-8 of that sum. Off by default (CudaOps::set_fast_kernels): the exact path keeps the
// CPU's bits, which golden conformance and the TP-invariance tests rely on.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/kernel_gemm.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/number_formats.h"

namespace pdspark::engine::backend {
namespace {

using kernels::WeightFormat;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileM = 16;           // rows of x per block
constexpr int kTileN = 16 * kWarps;  // weight rows per block: 16 per warp
constexpr int kTileK = 32;           // one FP4 scale block
constexpr int kLd = kTileK + 8;      // shared rows padded (WMMA wants a multiple of 8)

// Rows [m0, m0 + kTileM) of x against weight rows [n0, n0 + kTileN).
__device__ void W4A16Tile(const GemmCall& c, int64_t m0, int64_t n0) {
  namespace wmma = nvcuda::wmma;
  // WMMA loads and stores want 256-bit aligned tiles.
  __shared__ alignas(32) __nv_bfloat16 xs[kTileM][kLd];
  __shared__ alignas(32) __nv_bfloat16 ws[kTileN][kLd];
  __shared__ alignas(32) float out[kWarps][16][16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  const auto* codes = static_cast<const uint8_t*>(c.w.data);
  for (int64_t k0 = 0; k0 < c.w.cols; k0 += kTileK) {
    // x's slab [kTileM, kTileK], rounded to BF16 (zeros past the last row).
    for (int i = threadIdx.x; i < kTileM * kTileK; i += kThreads) {
      const int r = i / kTileK, k = i % kTileK;
      const float v = m0 + r < c.m ? c.x[(m0 + r) * c.ldx + k0 + k] : 0.0f;
      xs[r][k] = __float2bfloat16_rn(v);
    }
    // The weights' slab [kTileN, kTileK]: two threads per row, 16 codes (8 bytes) each.
    {
      const int r = threadIdx.x / 2, half = threadIdx.x % 2;
      const int64_t row = c.w.row0 + n0 + r, col = c.w.col0 + k0 + half * 16;
      const bool present = n0 + r < c.w.rows;
      const float scale =
          present ? kernels::E8M0ToFloat(c.w.scales[row * c.w.scale_stride + col / kTileK]) : 0.0f;
      const int64_t byte = present ? (row * c.w.row_stride + col) / 2 : 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const uint8_t pair = present ? codes[byte + b] : 0;
        ws[r][half * 16 + 2 * b] = __float2bfloat16_rn(kernels::Fp4E2M1ToFloat(pair & 0xF) * scale);
        ws[r][half * 16 + 2 * b + 1] =
            __float2bfloat16_rn(kernels::Fp4E2M1ToFloat(pair >> 4) * scale);
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      // y = x . w^T: B[k][n] = w[n][k], which is ws read column-major.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
      wmma::load_matrix_sync(a, &xs[0][kk], kLd);
      wmma::load_matrix_sync(b, &ws[warp * 16][kk], kLd);
      wmma::mma_sync(acc, a, b, acc);
    }
    __syncthreads();
  }
  wmma::store_matrix_sync(&out[warp][0][0], acc, 16, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 16 * 16; i += 32) {
    const int r = i / 16, n = i % 16;
    const int64_t row = m0 + r, feature = n0 + warp * 16 + n;
    if (row < c.m && feature < c.w.rows) c.y[row * c.ldy + feature] = out[warp][r][n];
  }
  __syncwarp();  // the warp's reads of `out` before its next tile's store
}

// blockIdx.z: the problem; blockIdx.x: kTileN weight rows; blockIdx.y: every gridDim.y-th tile
// of kTileM rows of x.
__global__ void W4A16Kernel(const KernelGemm* problems) {
  const GemmCall c = Resolved(problems[blockIdx.z]);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  if (n0 >= c.w.rows) return;  // uniform over the block
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM; m0 < c.m;
       m0 += static_cast<int64_t>(gridDim.y) * kTileM) {
    W4A16Tile(c, m0, n0);
  }
}

}  // namespace

bool CudaOps::W4A16Eligible(const GemmCall& c) {
  // Whole scale blocks of whole bytes: a view that starts and ends on the 32-column grid.
  return c.w.format == WeightFormat::kFp4E2M1 && c.w.col0 % kTileK == 0 && c.w.cols % kTileK == 0 &&
         c.w.row_stride % 2 == 0;
}

void CudaOps::W4A16GroupedGemm(std::span<const KernelGemm> problems) {
  const KernelGemm* device_problems = Upload(problems.data(), problems.size());
  if (!ok()) return;
  Launch("W4A16 GroupedGemm", W4A16Kernel, GroupedGrid(problems, kTileN, kTileM), kThreads, 0,
         device_problems);
}

}  // namespace pdspark::engine::backend
