// CudaOps: manifold-constrained hyper-connections (hc_pre with Sinkhorn mixing, hc_post, hc_head,
// the stream mean), mirroring engine/backend/cpu/cpu_hyper_connection.cc and
// kernels/cpu/sinkhorn.cc operation for operation.
//
// Every kernel computes a row in one thread block (or a row's slice of `dim` in one block), and
// every sum a single thread owns runs in the CPU's order, so a row's result never depends on
// the batch around it. Bit-exactness against the CPU:
//   - HcPost and StreamMean: exact (fp32/fp64 products and sums in the CPU's order; the library
//     is built with --fmad=false, and the CPU's own contraction in its AVX-512 clones changes
//     nothing because a float x float product is exact in double).
//   - The scaled mixes of HcPre and HcHead: exact except when the double sum of squares, taken
//     here as a fixed tree instead of the CPU's left-to-right loop, rounds to another float
//     (a relative double error of ~1e-16 against the fp32 rounding step of 6e-8: in practice
//     never).
//   - pre/post/comb and everything after them: exp runs in double and is rounded to float once
//     (correctly rounded in all but ~2^-29 of inputs); glibc's expf (0.502 ulp) differs from
//     the correctly rounded value in ~0.06% of inputs, so a rare exp differs by an ulp; the GPU
//     tests state the resulting tolerance.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/host_like_math.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend {

namespace {

// A power of two: the sum-of-squares tree halves it.
constexpr int kThreads = 256;

// kernels/cpu/activations.cc Sigmoid.
__device__ float Sigmoid(float x) { return 1.0f / (1.0f + HostLikeExp(-x)); }

// kernels::cpu::MeanSquare of a row of n, for all threads of the block: each fp32 square is
// rounded to fp32 (as on the CPU) and summed in double, per thread over a fixed stride, then
// over a fixed tree; the double sum rounds to the CPU's float (see the file comment).
__device__ float BlockMeanSquare(const float* x, int64_t n) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float sq = x[i] * x[i];
    sum += sq;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  return static_cast<float>(partial[0]) / static_cast<float>(n);
}

// CpuOps::ScaleMixes for one row: mixes (global, in place) and a shared copy, times
// 1 / sqrt(mean(streams^2) + norm_eps). Ends with the block synchronised.
__device__ void ScaleRowMixes(const HcShape& s, const float* streams, int64_t mix, float* mixes,
                              float* mixes_shared) {
  const float mean = BlockMeanSquare(streams, s.hc * s.dim);
  const float inv = 1.0f / sqrtf(mean + s.norm_eps);
  for (int64_t m = threadIdx.x; m < mix; m += kThreads) {
    const float scaled = mixes[m] * inv;
    mixes[m] = scaled;
    mixes_shared[m] = scaled;
  }
  __syncthreads();
}

// The WeightedStreamSum of cpu_hyper_connection.cc: y[i] = sum_j pre_j * stream_j[i] in double,
// j in order, one rounding. Each float x float product is exact in double.
__device__ void WeightedStreamSum(const HcShape& s, const float* pre, const float* streams,
                                  float* y) {
  for (int64_t i = threadIdx.x; i < s.dim; i += kThreads) {
    double acc = 0.0;
    for (int64_t j = 0; j < s.hc; ++j) {
      acc += static_cast<double>(pre[j]) * static_cast<double>(streams[j * s.dim + i]);
    }
    y[i] = static_cast<float>(acc);
  }
}

// ---- Sinkhorn (kernels/cpu/sinkhorn.cc): thread t owns row t or column t of comb ------------
// Each row's or column's sum is one thread's loop in the CPU's order, so the values match the
// CPU's sequential code; the rows (columns) are independent, so running them side by side
// changes nothing. Every helper ends with the block synchronised.

// Row j: the scaled and biased logits, their softmax, plus eps.
__device__ void CombSoftmaxRows(int64_t hc, const float* mixes, const float* scale,
                                const float* base, float eps, float* comb) {
  for (int64_t j = threadIdx.x; j < hc; j += kThreads) {
    float* row = comb + j * hc;
    for (int64_t k = 0; k < hc; ++k) {
      const int64_t m = 2 * hc + j * hc + k;
      row[k] = mixes[m] * scale[2] + base[m];
    }
    float row_max = row[0];  // std::max_element: the first of the largest
    for (int64_t k = 1; k < hc; ++k) {
      if (row_max < row[k]) row_max = row[k];
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = HostLikeExp(row[k] - row_max);
      sum += row[k];
    }
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  __syncthreads();
}

// Each of the hc lines of comb (rows: line stride hc, element stride 1; columns: 1 and hc)
// divided by its sum + eps, the sum taken in order along the line by one thread.
__device__ void NormaliseLines(int64_t hc, float eps, int64_t line_stride, int64_t step,
                               float* comb) {
  for (int64_t l = threadIdx.x; l < hc; l += kThreads) {
    float* line = comb + l * line_stride;
    float sum = 0.0f;
    for (int64_t i = 0; i < hc; ++i) sum += line[i * step];
    for (int64_t i = 0; i < hc; ++i) line[i * step] /= (sum + eps);
  }
  __syncthreads();
}
__device__ void NormaliseRows(int64_t hc, float eps, float* comb) {
  NormaliseLines(hc, eps, hc, 1, comb);
}
__device__ void NormaliseColumns(int64_t hc, float eps, float* comb) {
  NormaliseLines(hc, eps, 1, hc, comb);
}

// kernels::cpu::HcSplitSinkhorn on one row's scaled mixes (shared): pre and comb into shared
// memory, post into global memory.
__device__ void SplitSinkhorn(const HcShape& s, const float* mixes, const float* scale,
                              const float* base, float* pre, float* post, float* comb) {
  const int64_t hc = s.hc;
  for (int64_t j = threadIdx.x; j < hc; j += kThreads) {
    pre[j] = Sigmoid(mixes[j] * scale[0] + base[j]) + s.hc_eps;
    post[j] = 2.0f * Sigmoid(mixes[hc + j] * scale[1] + base[hc + j]);
  }
  CombSoftmaxRows(hc, mixes, scale, base, s.hc_eps, comb);
  NormaliseColumns(hc, s.hc_eps, comb);
  for (int64_t it = 1; it < s.sinkhorn_iters; ++it) {
    NormaliseRows(hc, s.hc_eps, comb);
    NormaliseColumns(hc, s.hc_eps, comb);
  }
}

// ---- Kernels ----------------------------------------------------------------------------------

// One block per row. Dynamic shared memory: mixes [(2+hc)*hc], comb [hc*hc], pre [hc].
__global__ void HcPreKernel(HcShape s, const float* streams, float* mixes, const float* scale,
                            const float* base, float* input, float* post, float* comb) {
  extern __shared__ float shared[];
  const int64_t hc = s.hc, mix = (2 + hc) * hc, row = blockIdx.x;
  float* mixes_shared = shared;
  float* comb_shared = mixes_shared + mix;
  float* pre_shared = comb_shared + hc * hc;
  const float* x = streams + row * hc * s.dim;
  ScaleRowMixes(s, x, mix, mixes + row * mix, mixes_shared);
  SplitSinkhorn(s, mixes_shared, scale, base, pre_shared, post + row * hc, comb_shared);
  for (int64_t j = threadIdx.x; j < hc * hc; j += kThreads) {
    comb[row * hc * hc + j] = comb_shared[j];
  }
  WeightedStreamSum(s, pre_shared, x, input + row * s.dim);
}

// One block per row. Dynamic shared memory: mixes [hc], pre [hc].
__global__ void HcHeadKernel(HcShape s, const float* streams, float* mixes, const float* scale,
                             const float* base, float* y) {
  extern __shared__ float shared[];
  const int64_t hc = s.hc, row = blockIdx.x;
  float* mixes_shared = shared;
  float* pre_shared = mixes_shared + hc;
  const float* x = streams + row * hc * s.dim;
  ScaleRowMixes(s, x, hc, mixes + row * hc, mixes_shared);
  for (int64_t j = threadIdx.x; j < hc; j += kThreads) {
    pre_shared[j] = Sigmoid(mixes_shared[j] * scale[0] + base[j]) + s.hc_eps;
  }
  __syncthreads();
  WeightedStreamSum(s, pre_shared, x, y + row * s.dim);
}

// Block (i-tile, row): thread i holds the hc residuals at position i in shared memory (the
// outputs overwrite them in place), then per destination stream k:
// post_k * f[i] + sum_j comb[j, k] * residual_j[i], in double, j in order (HcPostRow).
// Dynamic shared memory: [hc, kThreads].
__global__ void HcPostKernel(HcShape s, const float* f, const float* post, const float* comb,
                             float* streams) {
  extern __shared__ float residual[];
  const int64_t hc = s.hc, dim = s.dim, row = blockIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= dim) return;
  float* x = streams + row * hc * dim;
  const float* post_row = post + row * hc;
  const float* comb_row = comb + row * hc * hc;
  for (int64_t j = 0; j < hc; ++j) residual[j * kThreads + threadIdx.x] = x[j * dim + i];
  const double fi = f[row * dim + i];
  for (int64_t k = 0; k < hc; ++k) {
    double acc = static_cast<double>(post_row[k]) * fi;
    for (int64_t j = 0; j < hc; ++j) {
      const double cj = comb_row[j * hc + k];
      acc += cj * static_cast<double>(residual[j * kThreads + threadIdx.x]);
    }
    x[k * dim + i] = static_cast<float>(acc);
  }
}

// Block (row, i-tile): the fp32 sum of the hc streams at i, in order, over hc.
__global__ void StreamMeanKernel(HcShape s, const float* streams, float* out, int64_t out_stride) {
  const int64_t row = blockIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= s.dim) return;
  const float* x = streams + row * s.hc * s.dim;
  float sum = x[i];
  for (int64_t j = 1; j < s.hc; ++j) sum += x[j * s.dim + i];
  out[row * out_stride + i] = sum / static_cast<float>(s.hc);
}

// The grid of the element-wise kernels: rows (x: up to 2^31 - 1 of them) by tiles of `dim`.
dim3 TileGrid(int64_t dim, int64_t rows) {
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>((dim + kThreads - 1) / kThreads));
}

}  // namespace

void CudaOps::HcPre(const HcShape& s, const float* streams, float* mixes, int64_t rows,
                    const float* scale, const float* base, float* input, float* post, float* comb) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0) return;
  const int64_t hc = s.hc;
  const size_t shared = static_cast<size_t>((2 + hc) * hc + hc * hc + hc) * sizeof(float);
  Launch("HcPreKernel launch", HcPreKernel, static_cast<unsigned>(rows), kThreads, shared, s,
         streams, mixes, scale, base, input, post, comb);
}

void CudaOps::HcPost(const HcShape& s, const float* f, const float* post, const float* comb,
                     int64_t rows, float* streams) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0 || s.dim == 0) return;
  const size_t shared = static_cast<size_t>(s.hc) * kThreads * sizeof(float);
  Launch("HcPostKernel launch", HcPostKernel, TileGrid(s.dim, rows), kThreads, shared, s, f, post,
         comb, streams);
}

void CudaOps::HcHead(const HcShape& s, const float* streams, float* mixes, int64_t rows,
                     const float* scale, const float* base, float* y) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0) return;
  const size_t shared = static_cast<size_t>(2 * s.hc) * sizeof(float);
  Launch("HcHeadKernel launch", HcHeadKernel, static_cast<unsigned>(rows), kThreads, shared, s,
         streams, mixes, scale, base, y);
}

void CudaOps::StreamMean(const HcShape& s, const float* streams, int64_t rows, float* out,
                         int64_t out_stride) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0 || s.dim == 0) return;
  Launch("StreamMeanKernel launch", StreamMeanKernel, TileGrid(s.dim, rows), kThreads, 0, s,
         streams, out, out_stride);
}

}  // namespace pdspark::engine::backend
