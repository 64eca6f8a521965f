// The CUDA backend: one tensor-parallel rank on one GPU, its work queued on one stream
// (CudaOps), timed with CUDA events, its memory from the device's stream-ordered pool. Its
// communicator is null for one rank; with several, an NCCL communicator working on the backend's
// own stream (CreateAll).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_ops.h"

namespace pdspark::engine::backend {

class CudaBackend : public Backend {
 public:
  // Backend on device `device`, or an error naming why there is none (no driver, no such
  // device, no memory for a stream).
  static StatusOr<std::unique_ptr<CudaBackend>> Create(int device,
                                                       parallel::Communicator* comm = nullptr);
  // The backends of `world_size` tensor-parallel ranks, rank r on GPU r, each owning its NCCL
  // communicator, which runs the collectives on the backend's stream (ordered after the work
  // that made their inputs). One rank: no communicator.
  static StatusOr<std::vector<std::unique_ptr<CudaBackend>>> CreateAll(int world_size);
  ~CudaBackend() override;

  Device device() const override { return Device::kCuda; }
  Ops& ops() override { return *ops_; }
  std::unique_ptr<Timer> NewTimer() const override;
  parallel::Communicator* comm() const override { return comm_; }
  // From the device's pool, ordered on the stream (256-byte aligned); null when the device has
  // no room. Free returns it to the pool once the work queued before has run: no waiting.
  void* Allocate(size_t bytes) override;
  void Free(void* p) override;
  // cudaMemGetInfo's free bytes (what the pool keeps for reuse counts as used).
  int64_t FreeMemoryBytes() const override;

  int device_index() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  void BeginStep() override { ops_->BeginStep(); }
  void EndStep() override { ops_->EndStep(); }
  Status Synchronize() override { return ops_->Synchronize(); }

 private:
  CudaBackend(int device, cudaStream_t stream, parallel::Communicator* comm);

  int device_;
  cudaStream_t stream_;
  std::unique_ptr<CudaOps> ops_;
  parallel::Communicator* comm_;
  std::unique_ptr<parallel::Communicator> owned_comm_;     // CreateAll's NCCL communicator
  std::unique_ptr<parallel::Communicator> flushing_comm_;  // it, behind ops_->Flush()
};

}  // namespace pdspark::engine::backend
