// The NCCL backend of Communicator (CUDA builds): one rank per GPU, buffers are device pointers.
// Every call is enqueued on the communicator's stream. The stream is its own, and then each
// call is waited for before it returns (the interface's synchronous, in-place contract); or it
// is the one the rank computes on (CreateAll with streams: the CUDA backend's), and then a
// collective starts after the work that made its input and what reads its result is queued
// after it, so only Barrier waits. Errors of a collective not waited for come with the stream's
// next synchronisation (Backend::Synchronize); a rank that fails aborts the group, which ends
// the collectives the others wait on.
//
// Ordering: NCCL does not add in rank order (ring and tree algorithms choose their own order),
// but one reduction's result is computed once and copied, so it is bitwise the same on every
// rank, and it is reproducible for a fixed topology and NCCL_ALGO/NCCL_PROTO. The engine
// reduces in double (shard_plan.h), where the order only matters at the 2^-53 level.
//
//   // One process driving GPUs 0..3, each rank on its own thread:
//   auto comms = NcclCommunicator::CreateAll(4).value();
//   // thread r: cudaSetDevice(r); comms[r]->AllReduceSum(device_ptr, n);
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "engine/parallel/communicator.h"

struct ncclComm;
struct CUstream_st;

namespace pdspark::parallel {

class NcclCommunicator final : public Communicator {
 public:
  // Communicators for GPUs 0..world_size-1 of this process (ncclCommInitAll); fails clearly
  // when there are fewer GPUs. With `streams` (one per GPU, not owned) rank r works on
  // streams[r]; without, on a stream of its own.
  static StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> CreateAll(
      int world_size, const std::vector<CUstream_st*>& streams = {});
  // Rank `rank` of a group spread over processes: every rank passes the id rank 0 made with
  // NewUniqueId (sent by the caller's own channel) and the GPU it drives.
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(const std::string& unique_id, int rank,
                                                            int world_size, int device);
  static StatusOr<std::string> NewUniqueId();

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const { return device_; }

  Status AllReduceSum(float* data, size_t n) override;
  Status AllReduceSum(double* data, size_t n) override;
  Status AllGather(const float* in, size_t n, float* out) override;
  Status Broadcast(float* data, size_t n, int root) override;
  Status Barrier() override;
  // ncclCommAbort: the ranks blocked in collectives return, and every later call fails.
  void Abort() override;

 private:
  // `stream`: null for a stream of its own.
  NcclCommunicator(ncclComm* comm, int rank, int world_size, int device, CUstream_st* stream);
  // Refuses once aborted; else, on the rank's GPU, enqueues the collective (`enqueue` returns
  // its ncclResult_t), and waits for the stream if it is the communicator's own or `wait`.
  Status Collective(const char* what, const std::function<int()>& enqueue, bool wait = false);

  ncclComm* comm_;
  CUstream_st* stream_ = nullptr;
  bool owns_stream_ = false;
  int rank_, world_size_, device_;
  float* barrier_word_ = nullptr;  // one device float for Barrier
  std::atomic<bool> aborted_{false};
};

}  // namespace pdspark::parallel
