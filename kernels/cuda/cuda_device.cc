#include "kernels/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include "absl/strings/str_format.h"

namespace pdspark::cuda {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

StatusOr<std::string> DescribeDevice(int index) {
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties"));
  return absl::StrFormat("%s (sm_%d%d, %d GiB)", prop.name, prop.major, prop.minor,
                         static_cast<int>(prop.totalGlobalMem >> 30));
}

Status CudaStatus(int error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrFormat("%s failed: %s", what, cudaGetErrorString(static_cast<cudaError_t>(error))));
}

DeviceScope::DeviceScope(int device) : device_(device), previous_(device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device;
  if (previous_ != device_) cudaSetDevice(device_);
}

DeviceScope::~DeviceScope() {
  if (previous_ != device_) cudaSetDevice(previous_);
}

}  // namespace pdspark::cuda
