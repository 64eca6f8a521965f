#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/rms_norm.h"

#include <cuda_runtime.h>

namespace pdspark::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: a strided sum of squares, a shared-memory tree reduction, then the scale.
__global__ void RmsNormKernel(const float* x, const float* weight, float* y, int dim, float eps) {
  __shared__ float partial[kThreads];
  const float* row = x + static_cast<size_t>(blockIdx.x) * dim;
  float* out = y + static_cast<size_t>(blockIdx.x) * dim;
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum += row[i] * row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[i] = row[i] * inv_rms * weight[i];
}

}  // namespace

Status RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps,
               void* stream) {
  if (rows == 0) return absl::OkStatus();
  RmsNormKernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, weight, y, dim, eps);
  return CudaStatus(cudaGetLastError(), "RmsNormKernel launch");
}

}  // namespace pdspark::cuda
