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

// Converts a cudaError_t (passed as int to keep CUDA headers out of this header) to a Status.
Status CudaStatus(int error, const char* what);

}  // namespace pdspark::cuda
