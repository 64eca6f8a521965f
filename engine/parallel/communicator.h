// Collective operations between the tensor-parallel ranks of one model replica. The engine
// only talks to this interface, so the in-process implementation (ranks are threads sharing
// memory, for CPU runs and tests) and a later NCCL one (ranks are GPUs) are interchangeable.
//
// Every rank of the group must call the same collectives in the same order with the same sizes;
// a call blocks until all ranks have joined it. All operations work in place on caller-owned
// float buffers, which must stay valid and untouched by the caller until the call returns.
// Results are bitwise identical on every rank and from run to run.
//
// Buffers are in the ranks' memory (the model passes backend::Buffers): host memory for the
// in-process backend; the NCCL backend (CUDA builds, nccl_communicator.h) takes device pointers
// and enqueues on the stream it was created with; on the stream the rank computes on, a call
// returns once queued, and stream order stands for "blocks until all ranks have joined" (the
// rank's next read of the buffer is queued after the collective). The calls keep their shape.
#pragma once

#include <cstddef>

#include "common/base/status.h"

namespace pdspark::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // data[i] = sum over ranks r = 0..world_size-1, added in rank order, of rank r's data[i].
  virtual Status AllReduceSum(float* data, size_t n) = 0;
  // The same in double. The model reduces its partial sums in double so that rounding to float
  // once afterwards gives the same value whatever the number of ranks (docs/tensor_parallel.md).
  virtual Status AllReduceSum(double* data, size_t n) = 0;

  // out[r * n + i] = rank r's in[i]; `out` holds world_size * n floats. `in` may be
  // out + rank() * n (in-place gather).
  virtual Status AllGather(const float* in, size_t n, float* out) = 0;

  // Every rank's data[0..n) becomes root's data[0..n).
  virtual Status Broadcast(float* data, size_t n, int root) = 0;

  // Returns once every rank has called Barrier.
  virtual Status Barrier() = 0;

  // Releases every rank waiting in a collective of this group, for good, when one rank failed
  // and will not join (RankRunner::SetOnFailure). Thread-safe, idempotent. The in-process group
  // is aborted by its RankRunner, so this does nothing there; NCCL aborts its communicator.
  virtual void Abort() {}
};

}  // namespace pdspark::parallel
