#include "engine/backend/cuda/cuda_backend.h"

#include "absl/strings/str_format.h"

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
  explicit CudaTimer(cudaStream_t stream) : stream_(stream) {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~CudaTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void Start() override { cudaEventRecord(start_, stream_); }
  double Stop() override {
    cudaEventRecord(stop_, stream_);
    float ms = 0.0f;
    if (cudaEventSynchronize(stop_) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) {
      return 0.0;
    }
    return ms / 1e3;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
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
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice");
  }
  cudaStream_t stream = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return CudaError(e, "cudaStreamCreate");
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(device, stream, comm));
}

CudaBackend::CudaBackend(int device, cudaStream_t stream, parallel::Communicator* comm)
    : device_(device), stream_(stream), ops_(std::make_unique<CudaOps>(stream)), comm_(comm) {}

CudaBackend::~CudaBackend() {
  ops_->Synchronize().IgnoreError();
  ops_.reset();
  cudaStreamDestroy(stream_);
}

std::unique_ptr<Timer> CudaBackend::NewTimer() const {
  return std::make_unique<CudaTimer>(stream_);
}

void* CudaBackend::Allocate(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory answer is not sticky; clear it
    return nullptr;
  }
  return p;
}

void CudaBackend::Free(void* p) { cudaFree(p); }

int64_t CudaBackend::FreeMemoryBytes() const {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free_bytes);
}

}  // namespace pdspark::engine::backend
