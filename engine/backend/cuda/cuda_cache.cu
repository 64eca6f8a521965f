// CudaOps: writing rows into the KV cache's pages, as fp32 or encoded as FP8 KV rows with the
// encoder the CPU uses (kernels/number_formats.h), so the device's rows are the CPU's bytes.
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/launch.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/number_formats.h"

namespace pdspark::engine::backend {
namespace {

constexpr int kThreads = 128;  // 4 warps per row

struct Fp8Layout {
  int64_t head_dim, nope_dim, block, num_scales, rope_offset;
};

__global__ void WriteFp32RowsKernel(const float* values, int64_t width, void* const* rows) {
  const float* src = values + blockIdx.x * width;
  float* dst = static_cast<float*>(rows[blockIdx.x]);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

// One block per row; warp w encodes scale blocks w, w + 4, ...: the block's amax (exact in any
// order), its power-of-two scale, every code; then the padding is zeroed and the RoPE tail
// copied as fp32 (kernels::cpu::Fp8KvRow::Encode's bytes).
__global__ void WriteFp8RowsKernel(const float* values, Fp8Layout f, void* const* rows) {
  const float* src = values + blockIdx.x * f.head_dim;
  uint8_t* row = static_cast<uint8_t*>(rows[blockIdx.x]);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t b = warp; b < f.num_scales; b += warps) {
    const int64_t begin = b * f.block, end = min(f.nope_dim, begin + f.block);
    float amax = 0.0f;
    for (int64_t i = begin + lane; i < end; i += 32) amax = fmaxf(amax, fabsf(src[i]));
    for (int delta = 16; delta > 0; delta /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, delta));
    }
    const int k = kernels::Fp8ScaleExponent(amax);
    if (lane == 0) row[f.nope_dim + b] = static_cast<uint8_t>(k + 127);
    for (int64_t i = begin + lane; i < end; i += 32) {
      row[i] = kernels::FloatToFp8E4M3(ldexpf(src[i], -k));
    }
  }
  for (int64_t i = f.nope_dim + f.num_scales + threadIdx.x; i < f.rope_offset; i += blockDim.x) {
    row[i] = 0;
  }
  float* rope = reinterpret_cast<float*>(row + f.rope_offset);
  for (int64_t i = threadIdx.x; i < f.head_dim - f.nope_dim; i += blockDim.x) {
    rope[i] = src[f.nope_dim + i];
  }
}

}  // namespace

void CudaOps::WriteCacheRows(const float* values, int64_t count, int64_t width,
                             std::span<void* const> rows, const kernels::cpu::Fp8KvRow& fp8) {
  const cuda::DeviceScope on_device(device_);
  if (count == 0) return;
  void* const* device_rows = Upload(rows.data(), static_cast<size_t>(count));
  if (!ok()) return FreeScratch();
  if (fp8.head_dim > 0) {
    const Fp8Layout layout{fp8.head_dim, fp8.nope_dim, fp8.block, fp8.num_scales(),
                           fp8.rope_offset()};
    Launch("WriteCacheRows", WriteFp8RowsKernel, static_cast<unsigned>(count), kThreads, 0, values,
           layout, device_rows);
  } else {
    Launch("WriteCacheRows", WriteFp32RowsKernel, static_cast<unsigned>(count), kThreads, 0, values,
           width, device_rows);
  }
  FreeScratch();
}

}  // namespace pdspark::engine::backend
