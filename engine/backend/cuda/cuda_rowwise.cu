// CudaOps: the row-wise operations and the embedding gather. Each mirrors the CPU backend's
// kernel (kernels/cpu) operation for operation: with --fmad=false and IEEE division and square
// root, the results are the CPU's to the bit, except SwiGlu's expf (within 2 ulp of glibc's).
#include <cuda_runtime.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/grid_loop.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/argmax_rule.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/gumbel_sampling.h"
#include "kernels/number_formats.h"

namespace pdspark::engine::backend {
namespace {

constexpr int kThreads = kGridThreads;

__global__ void GatherRowsKernel(kernels::WeightMatrix table, const int32_t* ids, int64_t count,
                                 int64_t copies, float* out) {
  const int64_t n = table.cols, total = count * copies * n;
  PDSPARK_GRID_LOOP(e, total) {
    const int64_t row = e / n, col = e % n;
    out[e] = table.At(ids[row / copies], col);
  }
}

// One block per row: the sum of squares in double (as MeanSquare), reduced by a fixed tree so
// the row's result does not depend on the batch; then x * (1 / sqrt(mean + eps)) * weight.
__global__ void RmsNormKernel(const float* x, const float* weight, int64_t n, float eps, float* y) {
  __shared__ double partial[kThreads];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float sq = xr[i] * xr[i];
    sum += sq;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float mean = static_cast<float>(partial[0]) / static_cast<float>(n);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    yr[i] = weight ? weight[i] * (xr[i] * inv) : xr[i] * inv;
  }
}

struct RopeArgs {
  const float* cos;
  const float* sin;
  const float* freqs;
  int64_t half, max_positions;
};

// One thread per (row, vector, pair): the table's cos/sin, or the same arithmetic as
// kernels::cpu::ApplyRope past the table's end.
__global__ void RopeKernel(RopeArgs t, const int64_t* positions, int64_t rows, int64_t vectors,
                           int64_t stride, int64_t offset, bool inverse, float* x) {
  const int64_t total = rows * vectors * t.half;
  PDSPARK_GRID_LOOP(e, total) {
    const int64_t i = e % t.half, rv = e / t.half, row = rv / vectors;
    const int64_t position = positions[row];
    float c, s;
    if (position < t.max_positions) {
      c = t.cos[position * t.half + i];
      s = t.sin[position * t.half + i];
    } else {
      const float angle = static_cast<float>(position) * t.freqs[i];
      c = static_cast<float>(cos(static_cast<double>(angle)));
      s = static_cast<float>(sin(static_cast<double>(angle)));
    }
    float* v = x + rv * stride + offset;
    const float re = v[2 * i], im = v[2 * i + 1], sn = inverse ? -s : s;
    v[2 * i] = re * c - im * sn;
    v[2 * i + 1] = re * sn + im * c;
  }
}

// 2^ceil(log2(x)) from the IEEE bits (the reference's fast_round_scale).
__device__ float PowerOfTwoCeil(float x) {
  const uint32_t bits = __float_as_uint(x);
  const int exponent = static_cast<int>((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) ? 1 : 0);
  return __uint_as_float(static_cast<uint32_t>(exponent + 127) << 23);
}

// One warp per (row, block): the block's amax (a maximum: exact in any order), its
// power-of-two scale, and every value rounded onto the grid and scaled back.
template <bool kFp4>
__global__ void QuantDequantKernel(float* x, int64_t rows, int64_t cols, int64_t stride,
                                   int64_t block, float max_value, float amax_floor) {
  const int64_t blocks_per_row = (cols + block - 1) / block, total = rows * blocks_per_row;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  // A grid-stride loop over warps: the bound is the same for the whole warp, so every lane
  // takes part in each shuffle.
  for (int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       warp < total; warp += warps) {
    float* row = x + (warp / blocks_per_row) * stride;
    const int64_t b0 = (warp % blocks_per_row) * block, b1 = min(cols, b0 + block);
    float amax = 0.0f;
    for (int64_t i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(row[i]));
    for (int delta = 16; delta > 0; delta /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, delta));
    }
    amax = fmaxf(amax, amax_floor);
    const float scale = PowerOfTwoCeil(amax * (1.0f / max_value));
    for (int64_t i = b0 + lane; i < b1; i += 32) {
      const float scaled = fminf(fmaxf(row[i] / scale, -max_value), max_value);
      row[i] = (kFp4 ? kernels::RoundToE2M1(scaled) : kernels::RoundToE4M3(scaled)) * scale;
    }
  }
}

// One block per row, the row in shared memory: the butterflies of HadamardTransform in its
// order (each element sees the same additions), then the scale.
__global__ void HadamardKernel(float* x, int64_t n, float scale) {
  extern __shared__ float v[];
  float* row = x + blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v[i] = row[i];
  __syncthreads();
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
      const int64_t j = (p / h) * 2 * h + p % h;
      const float a = v[j], b = v[j + h];
      v[j] = a + b;
      v[j + h] = a - b;
    }
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = v[i] * scale;
}

__global__ void SwiGluKernel(const float* gate, const float* up, const float* row_scale,
                             int64_t rows, int64_t n, float limit, float* out) {
  PDSPARK_GRID_LOOP(e, rows * n) {
    float g = gate[e], u = up[e];
    if (limit > 0.0f) {
      u = fminf(fmaxf(u, -limit), limit);
      g = fminf(g, limit);
    }
    const float value = g / (1.0f + expf(-g)) * u;
    out[e] = row_scale ? row_scale[e / n] * value : value;
  }
}

// One thread per column, the rows added in order (rows may repeat: a token's experts).
__global__ void AddRowsDoubleKernel(const float* x, int64_t count, int64_t n, const int64_t* rows,
                                    double* acc, int64_t acc_stride) {
  PDSPARK_GRID_LOOP(c, n) {
    for (int64_t i = 0; i < count; ++i) acc[(rows ? rows[i] : i) * acc_stride + c] += x[i * n + c];
  }
}

// One block per row: each thread's candidates in index order, then a tree of merges; the rule
// is associative, so the winner is the in-order scan's (kernels/argmax_rule.h).
// `draws` null: the values themselves; else each value's GumbelKey for its row's draw.
__global__ void ArgMaxKernel(const float* x, int64_t n, int64_t ldx,
                             const kernels::GumbelRow* draws, int64_t first_token,
                             kernels::ArgmaxCandidate* out) {
  // Shared memory takes no constructors: the candidates as two plain arrays.
  __shared__ float values[kThreads];
  __shared__ int32_t indices[kThreads];
  const float* row = x + blockIdx.x * ldx;
  kernels::ArgmaxCandidate mine;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float value =
        draws ? kernels::GumbelKey(row[j], draws[blockIdx.x], first_token + j) : row[j];
    mine = kernels::ArgmaxMerge(mine, {value, static_cast<int32_t>(j)});
  }
  values[threadIdx.x] = mine.value;
  indices[threadIdx.x] = mine.index;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const kernels::ArgmaxCandidate merged =
          kernels::ArgmaxMerge({values[threadIdx.x], indices[threadIdx.x]},
                               {values[threadIdx.x + stride], indices[threadIdx.x + stride]});
      values[threadIdx.x] = merged.value;
      indices[threadIdx.x] = merged.index;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = {values[0], indices[0]};
}

// One block per row: each thread's mass over its values, then a tree of exact additions.
__global__ void SoftmaxMassesKernel(const float* x, int64_t n, int64_t ldx,
                                    const kernels::MassRow* rows, kernels::FixedMass* out) {
  __shared__ uint64_t lo[kThreads];
  __shared__ uint64_t hi[kThreads];
  const float* row = x + blockIdx.x * ldx;
  const kernels::MassRow against = rows[blockIdx.x];
  kernels::FixedMass mine;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    mine.Add(kernels::MassUnits(row[j], against.best, against.inv_temperature));
  }
  lo[threadIdx.x] = mine.lo;
  hi[threadIdx.x] = mine.hi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      kernels::FixedMass sum{lo[threadIdx.x], hi[threadIdx.x]};
      sum.Add(kernels::FixedMass{lo[threadIdx.x + stride], hi[threadIdx.x + stride]});
      lo[threadIdx.x] = sum.lo;
      hi[threadIdx.x] = sum.hi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = kernels::FixedMass{lo[0], hi[0]};
}

__global__ void ScaleKernel(float* x, int64_t n, float s) { PDSPARK_GRID_LOOP(i, n) x[i] *= s; }

__global__ void GatherActivationRowsKernel(const float* x, int64_t ldx, int64_t width,
                                           const int64_t* rows, int64_t count, float* out) {
  PDSPARK_GRID_LOOP(e, count * width) out[e] = x[rows[e / width] * ldx + e % width];
}

__global__ void DoubleToFloatKernel(const double* x, int64_t n, float* y) {
  PDSPARK_GRID_LOOP(i, n) y[i] = static_cast<float>(x[i]);
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* out) {
  PDSPARK_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

}  // namespace

void CudaOps::GatherActivationRows(const float* x, int64_t ldx, int64_t width,
                                   std::span<const int64_t> rows, float* out) {
  const cuda::DeviceScope on_device(device_);
  const int64_t count = static_cast<int64_t>(rows.size());
  if (count == 0 || width == 0) return;
  const int64_t* device_rows = Upload(rows.data(), rows.size());
  if (!ok()) return FreeScratch();
  Launch("GatherActivationRows", GatherActivationRowsKernel, BlocksFor(count * width), kThreads, 0,
         x, ldx, width, device_rows, count, out);
  FreeScratch();
}

void CudaOps::DoubleToFloat(const double* x, int64_t n, float* y) {
  const cuda::DeviceScope on_device(device_);
  if (n == 0) return;
  Launch("DoubleToFloat", DoubleToFloatKernel, BlocksFor(n), kThreads, 0, x, n, y);
}

void CudaOps::Add(const float* a, const float* b, int64_t n, float* out) {
  const cuda::DeviceScope on_device(device_);
  if (n == 0) return;
  Launch("Add", AddKernel, BlocksFor(n), kThreads, 0, a, b, n, out);
}

void CudaOps::GatherRows(const kernels::WeightMatrix& table, std::span<const int32_t> ids,
                         int64_t copies, float* out) {
  const cuda::DeviceScope on_device(device_);
  const int64_t count = static_cast<int64_t>(ids.size());
  if (count == 0 || copies == 0) return;
  const int32_t* device_ids = Upload(ids.data(), ids.size());
  if (!ok()) return FreeScratch();
  Launch("GatherRows", GatherRowsKernel, BlocksFor(count * copies * table.cols), kThreads, 0, table,
         device_ids, count, copies, out);
  FreeScratch();
}

void CudaOps::RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                      float* y) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0) return;
  Launch("RmsNorm", RmsNormKernel, static_cast<unsigned>(rows), kThreads, 0, x, weight, n, eps, y);
}

void CudaOps::Rope(const kernels::cpu::RopeTable& table, const int64_t* positions, int64_t rows,
                   int64_t vectors, int64_t stride, int64_t offset, bool inverse, float* x) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0 || vectors == 0 || table.rope_dim == 0) return;
  const DeviceRope rope = RopeOnDevice(table);
  if (!rope.cos) return;
  const RopeArgs args{rope.cos, rope.sin, rope.freqs, rope.rope_dim / 2, rope.max_positions};
  Launch("Rope", RopeKernel, BlocksFor(rows * vectors * args.half), kThreads, 0, args, positions,
         rows, vectors, stride, offset, inverse, x);
}

void CudaOps::QuantDequantFp8(float* x, int64_t rows, int64_t cols, int64_t stride, int64_t block) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0 || cols == 0) return;
  const int64_t warps = rows * ((cols + block - 1) / block);
  Launch("QuantDequantFp8", QuantDequantKernel<false>, BlocksFor(32 * warps), kThreads, 0, x, rows,
         cols, stride, block, 448.0f, 1e-4f);
}

void CudaOps::QuantDequantFp4(float* x, int64_t rows, int64_t cols, int64_t stride, int64_t block) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0 || cols == 0) return;
  const int64_t warps = rows * ((cols + block - 1) / block);
  Launch("QuantDequantFp4", QuantDequantKernel<true>, BlocksFor(32 * warps), kThreads, 0, x, rows,
         cols, stride, block, 6.0f, 6.0f * 0x1p-126f);
}

void CudaOps::Hadamard(float* x, int64_t rows, int64_t n, float scale) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0) return;
  Launch("Hadamard", HadamardKernel, static_cast<unsigned>(rows), kThreads, n * sizeof(float), x, n,
         scale);
}

void CudaOps::SwiGlu(const float* gate, const float* up, const float* row_scale, int64_t rows,
                     int64_t n, float limit, float* out) {
  const cuda::DeviceScope on_device(device_);
  if (rows * n == 0) return;
  Launch("SwiGlu", SwiGluKernel, BlocksFor(rows * n), kThreads, 0, gate, up, row_scale, rows, n,
         limit, out);
}

void CudaOps::AddRowsDouble(const float* x, int64_t count, int64_t n, const int64_t* rows,
                            double* acc, int64_t acc_stride) {
  const cuda::DeviceScope on_device(device_);
  if (count == 0 || n == 0) return;
  Launch("AddRowsDouble", AddRowsDoubleKernel, BlocksFor(n), kThreads, 0, x, count, n, rows, acc,
         acc_stride);
}

void CudaOps::ArgMax(const float* x, int64_t rows, int64_t n, int64_t ldx,
                     kernels::ArgmaxCandidate* out) {
  const cuda::DeviceScope on_device(device_);
  if (rows == 0) return;
  Launch("ArgMax", ArgMaxKernel, static_cast<unsigned>(rows), kThreads, 0, x, n, ldx, nullptr, 0,
         out);
}

void CudaOps::GumbelArgMax(const float* x, int64_t n, int64_t ldx, int64_t first_token,
                           std::span<const kernels::GumbelRow> draws,
                           kernels::ArgmaxCandidate* out) {
  const cuda::DeviceScope on_device(device_);
  if (draws.empty()) return;
  const kernels::GumbelRow* device_draws = Upload(draws.data(), draws.size());
  if (ok()) {
    Launch("GumbelArgMax", ArgMaxKernel, static_cast<unsigned>(draws.size()), kThreads, 0, x, n,
           ldx, device_draws, first_token, out);
  }
  FreeScratch();
}

void CudaOps::SoftmaxMasses(const float* x, int64_t n, int64_t ldx,
                            std::span<const kernels::MassRow> rows, kernels::FixedMass* out) {
  const cuda::DeviceScope on_device(device_);
  if (rows.empty()) return;
  const kernels::MassRow* device_rows = Upload(rows.data(), rows.size());
  if (ok()) {
    Launch("SoftmaxMasses", SoftmaxMassesKernel, static_cast<unsigned>(rows.size()), kThreads, 0, x,
           n, ldx, device_rows, out);
  }
  FreeScratch();
}

void CudaOps::Scale(float* x, int64_t n, float s) {
  const cuda::DeviceScope on_device(device_);
  if (n == 0) return;
  Launch("Scale", ScaleKernel, BlocksFor(n), kThreads, 0, x, n, s);
}

}  // namespace pdspark::engine::backend
