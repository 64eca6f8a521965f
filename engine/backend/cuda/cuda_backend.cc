#include "engine/backend/cuda/cuda_backend.h"

#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "kernels/cuda/cuda_device.h"
#ifdef PDSPARK_HAVE_NCCL
#include "engine/parallel/nccl_communicator.h"
#endif

namespace pdspark::engine::backend {
namespace {

Status CudaError(cudaError_t error, const char* what) {
  return absl::FailedPreconditionError(
      absl::StrFormat("%s failed: %s (is a CUDA device visible to this process? "
                      "check nvidia-smi and CUDA_VISIBLE_DEVICES)",
                      what, cudaGetErrorString(error)));
}

// Seconds between two events recorded on the backend's stream: the device's own clock, so
// the time is the work's, not the host's wait for it.
class CudaTimer : public Timer {
 public:
  CudaTimer(CudaOps& ops, int device) : ops_(ops), device_(device) {
    const cuda::DeviceScope on_device(device_);
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~CudaTimer() override {
    const cuda::DeviceScope on_device(device_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // The events go after what was recorded before them.
  void Start() override { ops_.RecordEvent(start_); }
  double Stop() override {
    const cuda::DeviceScope on_device(device_);
    ops_.RecordEvent(stop_);
    float ms = 0.0f;
    if (cudaEventSynchronize(stop_) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) {
      return 0.0;
    }
    return ms / 1e3;
  }

 private:
  CudaOps& ops_;
  int device_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The NCCL communicator, queueing the rank's recorded work before each collective (which NCCL
// queues on the same stream).
class FlushingCommunicator : public parallel::Communicator {
 public:
  FlushingCommunicator(parallel::Communicator& comm, CudaOps& ops) : comm_(comm), ops_(ops) {}
  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.world_size(); }
  Status AllReduceSum(float* data, size_t n) override {
    ops_.Flush();
    return comm_.AllReduceSum(data, n);
  }
  Status AllReduceSum(double* data, size_t n) override {
    ops_.Flush();
    return comm_.AllReduceSum(data, n);
  }
  Status AllGather(const float* in, size_t n, float* out) override {
    ops_.Flush();
    return comm_.AllGather(in, n, out);
  }
  Status Broadcast(float* data, size_t n, int root) override {
    ops_.Flush();
    return comm_.Broadcast(data, n, root);
  }
  Status Barrier() override {
    ops_.Flush();
    return comm_.Barrier();
  }
  void Abort() override { comm_.Abort(); }

 private:
  parallel::Communicator& comm_;
  CudaOps& ops_;
};

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device,
                                                           parallel::Communicator* comm) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return CudaError(e, "cudaGetDeviceCount");
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA device %d does not exist: this process sees %d", device, count));
  }
  const cuda::DeviceScope on_device(device);
  // The device's pool keeps what is freed instead of returning it to the driver at each
  // synchronisation: a step frees and allocates the same activation sizes again.
  cudaMemPool_t pool = nullptr;
  uint64_t keep_everything = UINT64_MAX;
  if (const cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, device); e != cudaSuccess) {
    return CudaError(e, "cudaDeviceGetDefaultMemPool");
  }
  if (const cudaError_t e =
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything);
      e != cudaSuccess) {
    return CudaError(e, "cudaMemPoolSetAttribute");
  }
  cudaStream_t stream = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return CudaError(e, "cudaStreamCreate");
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(device, stream, comm));
}

StatusOr<std::vector<std::unique_ptr<CudaBackend>>> CudaBackend::CreateAll(int world_size) {
  std::vector<std::unique_ptr<CudaBackend>> backends;
  std::vector<CUstream_st*> streams;
  for (int r = 0; r < world_size; ++r) {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, Create(r));
    streams.push_back(backend->stream());
    backends.push_back(std::move(backend));
  }
  if (world_size == 1) return backends;
#ifdef PDSPARK_HAVE_NCCL
  ASSIGN_OR_RETURN(auto comms, parallel::NcclCommunicator::CreateAll(world_size, streams));
  for (int r = 0; r < world_size; ++r) {
    CudaBackend& b = *backends[r];
    b.owned_comm_ = std::move(comms[r]);
    b.flushing_comm_ = std::make_unique<FlushingCommunicator>(*b.owned_comm_, *b.ops_);
    b.comm_ = b.flushing_comm_.get();
  }
  return backends;
#else
  return absl::FailedPreconditionError(
      "tensor parallelism over GPUs needs NCCL, which this build did not find: install libnccl "
      "under /usr/local/cuda and rebuild, or use --tensor-parallel-size 1");
#endif
}

CudaBackend::CudaBackend(int device, cudaStream_t stream, parallel::Communicator* comm)
    : device_(device),
      stream_(stream),
      ops_(std::make_unique<CudaOps>(stream, device)),
      comm_(comm) {}

CudaBackend::~CudaBackend() {
  const cuda::DeviceScope on_device(device_);
  ops_->Synchronize().IgnoreError();
  if (ops_->cuda_graphs()) {
    const CudaOps::GraphCounts c = ops_->graph_counts();
    LOG_INFO(
        "cuda graphs device={} launches_from_graphs={} graph_launches={} graphs={} "
        "launches_one_by_one={} captures_failed={}",
        device_, c.launches_from_graphs, c.graph_launches, c.graphs, c.launches_run,
        c.captures_failed);
  }
  flushing_comm_.reset();  // it refers to ops_
  ops_.reset();
  owned_comm_.reset();  // before the stream its collectives ran on
  cudaStreamDestroy(stream_);
}

std::unique_ptr<Timer> CudaBackend::NewTimer() const {
  return std::make_unique<CudaTimer>(*ops_, device_);
}

// Stream-ordered: cudaMalloc and cudaFree wait for the whole device, and a step frees its
// activations as it goes, so every free would stall the host until the GPU caught up. Every
// user of the memory works on stream_ (the operations, the KV pool's copies, the collectives),
// after the allocation and before the free in the stream's order.
void* CudaBackend::Allocate(size_t bytes) { return ops_->AllocateDeviceMemory(bytes); }

void CudaBackend::Free(void* p) {
  ops_->FreeDeviceMemory(p);  // after the work queued or recorded before
}

int64_t CudaBackend::FreeMemoryBytes() const {
  const cuda::DeviceScope on_device(device_);
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free_bytes);
}

}  // namespace pdspark::engine::backend
