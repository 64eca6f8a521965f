// CudaOps: error recording, stream-ordered scratch and the device copies of host-side inputs
// (RoPE tables, attention key lists; per-call arguments through pinned staging). The operations
// themselves are in the cuda_*.cu files.
#include "engine/backend/cuda/cuda_ops.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_device.h"

namespace pdspark::engine::backend {

CudaOps::~CudaOps() {
  const cuda::DeviceScope on_device(device_);
  FreeScratch();
  for (auto& [table, rope] : ropes_) FreeRope(rope);
  for (auto& [view, scales] : fp8_scales_) cudaFree(scales);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

void CudaOps::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  Fail(absl::InternalError(
      absl::StrFormat("CUDA backend: %s failed: %s", what, cudaGetErrorString(error))));
}

void CudaOps::Fail(Status failure) {
  const std::lock_guard<std::mutex> lock(status_mutex_);
  status_.Update(std::move(failure));  // keeps the first
  failed_.store(true, std::memory_order_release);
}

Status CudaOps::Synchronize() {
  const cuda::DeviceScope on_device(device_);
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  const std::lock_guard<std::mutex> lock(status_mutex_);
  return status_;
}

void* CudaOps::ScratchBytes(size_t bytes, const char* what) {
  void* device = nullptr;
  if (bytes == 0) return nullptr;
  Check(cudaMallocAsync(&device, bytes, stream_), what);
  if (device) scratch_.push_back(device);
  return device;
}

const void* CudaOps::UploadBytes(const void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  cudaError_t error = cudaSuccess;
  const void* staged = staging_.Stage(host, bytes, &error);
  if (!staged) {
    Check(error, "cudaHostAlloc (upload staging)");
    return nullptr;
  }
  void* device = ScratchBytes(bytes, "cudaMallocAsync (upload)");
  if (!device) return nullptr;
  Check(cudaMemcpyAsync(device, staged, bytes, cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync (upload)");
  return device;
}

void CudaOps::FreeScratch() {
  for (void* p : scratch_) cudaFreeAsync(p, stream_);
  scratch_.clear();
}

void CudaOps::FreeRope(DeviceRope& rope) {
  cudaFree(rope.freqs);
  cudaFree(rope.cos);
  cudaFree(rope.sin);
  rope = {};
}

CudaOps::DeviceRope CudaOps::RopeOnDevice(const kernels::cpu::RopeTable& table) {
  DeviceRope& rope = ropes_[&table];
  if (rope.cos && rope.host_cos == table.cos.data() && rope.host_size == table.cos.size()) {
    return rope;
  }
  FreeRope(rope);
  rope.host_cos = table.cos.data();
  rope.host_size = table.cos.size();
  rope.rope_dim = table.rope_dim;
  rope.max_positions = table.max_positions();
  // Copies on the stream: a pageable cudaMemcpy may return before its data has landed, and
  // this non-blocking stream would not wait for it.
  auto copy = [&](const std::vector<float>& values) -> float* {
    void* device = nullptr;
    const size_t bytes = std::max<size_t>(1, values.size()) * sizeof(float);
    Check(cudaMalloc(&device, bytes), "cudaMalloc (RoPE table)");
    if (device && !values.empty()) {
      Check(cudaMemcpyAsync(device, values.data(), bytes, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync (RoPE table)");
    }
    return static_cast<float*>(device);
  };
  rope.freqs = copy(table.freqs);
  rope.cos = copy(table.cos);
  rope.sin = copy(table.sin);
  if (!rope.freqs || !rope.cos || !rope.sin) {
    FreeRope(rope);
    ropes_.erase(&table);
    return {};
  }
  return rope;
}

void CudaOps::CopyToDevice(void* dst, const void* src, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  // From pageable memory the copy has read `src` when it returns; the stream orders the rest.
  if (bytes)
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyToDevice");
}

void CudaOps::CopyToHost(void* dst, const void* src, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (!bytes) return;
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost");
  Check(cudaStreamSynchronize(stream_), "CopyToHost (wait)");
}

void CudaOps::Copy(void* dst, const void* src, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (bytes) Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "Copy");
}

void CudaOps::Zero(void* p, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (bytes) Check(cudaMemsetAsync(p, 0, bytes, stream_), "Zero");
}

// Portable: pinned for every device of the process (the ranks' replicas all copy through it). A
// failure is not the stream's (it is cleared from the runtime's last error, which the next
// launch check would otherwise report as its own).
bool CudaOps::PinHostMemory(void* p, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

void CudaOps::UnpinHostMemory(void* p) {
  const cuda::DeviceScope on_device(device_);
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

}  // namespace pdspark::engine::backend
