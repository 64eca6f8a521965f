// CudaOps: error recording, stream-ordered scratch and the device copies of host-side inputs
// (RoPE tables, attention key lists). The operations themselves are in the cuda_*.cu files.
#include "engine/backend/cuda/cuda_ops.h"

#include "absl/strings/str_format.h"

namespace pdspark::engine::backend {

CudaOps::~CudaOps() {
  FreeScratch();
  for (auto& [table, rope] : ropes_) {
    cudaFree(const_cast<float*>(rope.freqs));
    cudaFree(const_cast<float*>(rope.cos));
    cudaFree(const_cast<float*>(rope.sin));
  }
}

void CudaOps::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess || !status_.ok()) return;
  status_ = absl::InternalError(
      absl::StrFormat("CUDA backend: %s failed: %s", what, cudaGetErrorString(error)));
}

Status CudaOps::Synchronize() {
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
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
  void* device = ScratchBytes(bytes, "cudaMallocAsync (upload)");
  if (!device) return nullptr;
  Check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync (upload)");
  return device;
}

void CudaOps::FreeScratch() {
  for (void* p : scratch_) cudaFreeAsync(p, stream_);
  scratch_.clear();
}

const CudaOps::DeviceRope& CudaOps::RopeOnDevice(const kernels::cpu::RopeTable& table) {
  auto [it, inserted] = ropes_.try_emplace(&table);
  if (!inserted) return it->second;
  DeviceRope& rope = it->second;
  rope.rope_dim = table.rope_dim;
  rope.max_positions = table.max_positions();
  auto copy = [&](const std::vector<float>& values) -> const float* {
    void* device = nullptr;
    if (values.empty()) return nullptr;
    Check(cudaMalloc(&device, values.size() * sizeof(float)), "cudaMalloc (RoPE table)");
    if (!device) return nullptr;
    Check(cudaMemcpy(device, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (RoPE table)");
    return static_cast<const float*>(device);
  };
  rope.freqs = copy(table.freqs);
  rope.cos = copy(table.cos);
  rope.sin = copy(table.sin);
  return rope;
}

CudaOps::DeviceKeys CudaOps::KeysOnDevice(const AttentionKeys& keys) {
  return {Upload(keys.rows.data(), keys.rows.size()),
          Upload(keys.offsets.data(), keys.offsets.size())};
}

}  // namespace pdspark::engine::backend
