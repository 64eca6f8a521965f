// Discovery of CUDA devices. Every GPU code path asks here first so that a machine with the
// toolkit but without a GPU (CI) skips cleanly instead of failing.
#pragma once

#include <string>

#include "common/base/status.h"

namespace pdspark::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device.
int DeviceCount();

// "NVIDIA H200 (sm_90, 139 GiB)" for device `index`.
StatusOr<std::string> DescribeDevice(int index);

// Makes GPU `device` the calling thread's current CUDA device for a scope, then restores the
// one before. A rank's GPU is reached from more than its own thread (the KV pool's host writes
// reach every rank's replica from the engine's thread), and CUDA launches, allocations and
// stream operations act on the current device.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int device_;
  int previous_;
};

// Converts a cudaError_t (passed as int to keep CUDA headers out of this header) to a Status.
Status CudaStatus(int error, const char* what);

}  // namespace pdspark::cuda
