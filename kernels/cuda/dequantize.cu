#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/dequantize.h"

namespace pdspark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// A grid-stride loop over the view's elements, row-major.
__global__ void DequantizeKernel(kernels::WeightMatrix w, float* out) {
  const int64_t n = w.rows * w.cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[e] = w.At(e / w.cols, e % w.cols);
  }
}

}  // namespace

Status DequantizeWeights(const kernels::WeightMatrix& w, float* out, void* stream) {
  const int64_t n = w.rows * w.cols;
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  DequantizeKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                     static_cast<cudaStream_t>(stream)>>>(w, out);
  return CudaStatus(cudaGetLastError(), "DequantizeKernel launch");
}

}  // namespace pdspark::cuda
