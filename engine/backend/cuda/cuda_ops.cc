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
  // Work still recorded (a step that never ended) is queued as recorded, then what it freed.
  for (Recorded& r : pending_) r.work();
  pending_.clear();
  for (void* p : deferred_frees_) cudaFreeAsync(p, stream_);
  deferred_frees_.clear();
  recording_thread_.store(std::thread::id(), std::memory_order_relaxed);
  FreeScratch();
  for (auto& [key, g] : graphs_by_key_) {
    cudaGraphExecDestroy(g.exec);
    cudaGraphDestroy(g.graph);
  }
  if (scratch_arena_.base) cudaFreeAsync(scratch_arena_.base, stream_);
  // The pool's memory goes back once the frees queued into it have run.
  if (own_scratch_pool_) cudaMemPoolDestroy(scratch_pool_);
  for (auto& [table, rope] : ropes_) FreeRope(rope);
  for (auto& [view, scales] : fp8_scales_) cudaFree(scales);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

void CudaOps::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  if (capturing_) {  // a failed capture is no failure of the work: it runs without a graph
    if (capture_error_ == cudaSuccess) capture_error_ = error;
    return;
  }
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
  const bool was_recording = recording();
  if (was_recording) {
    Flush();
    recording_thread_.store(std::thread::id(), std::memory_order_relaxed);
  }
  const auto capture_lock = LockOutCaptures();
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (was_recording) step_staging_.Reset();  // every copy from it has run
  const std::lock_guard<std::mutex> lock(status_mutex_);
  return status_;
}

// Scratch has a pool of its own: the sizes it asks for change with the context (attention's key
// lists), and, drawn from the device's pool, they would move the activations' addresses
// (Backend::Allocate) from step to step, which the graphs' signatures hold.
cudaMemPool_t CudaOps::ScratchPool() {
  if (scratch_pool_) return scratch_pool_;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_;
  uint64_t keep_everything = UINT64_MAX;
  if (cudaMemPoolCreate(&scratch_pool_, &props) == cudaSuccess) {
    own_scratch_pool_ = true;
    cudaMemPoolSetAttribute(scratch_pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything);
    return scratch_pool_;
  }
  cudaGetLastError();
  Check(cudaDeviceGetDefaultMemPool(&scratch_pool_, device_), "cudaDeviceGetDefaultMemPool");
  return scratch_pool_;
}

void* CudaOps::ScratchBytes(size_t bytes, const char* what) {
  void* device = nullptr;
  if (bytes == 0) return nullptr;
  if (recording()) {
    if (void* p = FromArena(bytes)) return p;
  }
  Check(cudaMallocFromPoolAsync(&device, bytes, ScratchPool(), stream_), what);
  if (device) scratch_.push_back(device);
  return device;
}

const void* CudaOps::UploadBytes(const void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (recording()) return RecordUpload(host, bytes);
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
  if (recording()) {
    // The recorded work that uses it is queued at the flush; the scratch arena's next user is
    // queued after it.
    deferred_frees_.insert(deferred_frees_.end(), scratch_.begin(), scratch_.end());
    scratch_arena_.top = 0;
  } else {
    for (void* p : scratch_) cudaFreeAsync(p, stream_);
  }
  scratch_.clear();
}

// From another thread than the recording one, the stream-ordered calls wait out a capture (one
// would become part of the graph).
void* CudaOps::AllocateDeviceMemory(size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  const auto capture_lock = LockOutCaptures();
  void* p = nullptr;
  if (cudaMallocAsync(&p, bytes, stream_) != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory answer is not sticky; clear it
    return nullptr;
  }
  return p;
}

void CudaOps::FreeDeviceMemory(void* p) {
  const cuda::DeviceScope on_device(device_);
  if (recording()) {
    deferred_frees_.push_back(p);
    return;
  }
  const auto capture_lock = LockOutCaptures();
  cudaFreeAsync(p, stream_);
}

cudaError_t CudaOps::RecordEvent(cudaEvent_t event) {
  const cuda::DeviceScope on_device(device_);
  Flush();
  const auto capture_lock = LockOutCaptures();
  return cudaEventRecord(event, stream_);
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
  Flush();  // recorded launches may still name the table it replaces (freed synchronously)
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

// From the recording thread a small copy from the host is a recorded upload (src is copied into
// pinned memory now) and a large one (KV pages) queues what was recorded first, as a copy to the
// host does; from another thread they wait out a capture.
void CudaOps::CopyToDevice(void* dst, const void* src, size_t bytes) {
  constexpr size_t kLargestRecorded = size_t{1} << 20;
  const cuda::DeviceScope on_device(device_);
  if (!bytes) return;
  if (recording() && bytes <= kLargestRecorded) {
    RecordUpload(src, bytes, dst);
    return;
  }
  Flush();
  const auto capture_lock = LockOutCaptures();
  // From pageable memory the copy has read `src` when it returns; the stream orders the rest.
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyToDevice");
}

void CudaOps::CopyToHost(void* dst, const void* src, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (!bytes) return;
  Flush();
  const auto capture_lock = LockOutCaptures();
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost");
  Check(cudaStreamSynchronize(stream_), "CopyToHost (wait)");
}

void CudaOps::Copy(void* dst, const void* src, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (!bytes) return;
  LaunchSignature signature;
  signature.AddName("Copy");
  signature.Add(dst);
  signature.Add(src);
  signature.Add(bytes);
  const auto capture_lock = LockOutCaptures();
  Enqueue(signature, [=, this] {
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "Copy");
  });
}

void CudaOps::Zero(void* p, size_t bytes) {
  const cuda::DeviceScope on_device(device_);
  if (!bytes) return;
  LaunchSignature signature;
  signature.AddName("Zero");
  signature.Add(p);
  signature.Add(bytes);
  const auto capture_lock = LockOutCaptures();
  Enqueue(signature, [=, this] { Check(cudaMemsetAsync(p, 0, bytes, stream_), "Zero"); });
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
