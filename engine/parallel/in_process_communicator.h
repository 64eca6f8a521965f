// Tensor parallelism inside one process: each rank is a thread, and collectives read and write
// the peers' buffers directly through shared memory (no sockets, no queues, no staging copies).
//
// Every collective is: publish my buffer pointers and arguments, barrier, check that all ranks
// called the same collective with the same sizes, do my share of the work on the published
// buffers, barrier. The second barrier keeps a rank from returning (and reusing its buffer)
// while peers still read or write it.
//
// AllReduceSum is a reduce-scatter fused with an all-gather: rank r owns one contiguous slice,
// sums that slice over all ranks in rank order (0 + 1 + ... + N-1) and writes the sum into every
// rank's buffer. The summation order depends only on the element, never on timing, so results
// are bitwise reproducible and identical across ranks.
//
// Usage:
//   ASSIGN_OR_RETURN(std::unique_ptr<InProcessGroup> group, InProcessGroup::Create(4));
//   // thread r:
//   Communicator* comm = group->Rank(r);
//   RETURN_IF_ERROR(comm->AllReduceSum(partial.data(), partial.size()));
//
// Each rank's communicator must be used by one thread at a time, and the group must outlive
// the calls. After a barrier timeout (or Abort) the group is broken: every later call on every
// rank returns the same error, and a new group must be created.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/group_barrier.h"

namespace pdspark::parallel {

struct InProcessGroupOptions {
  // How long a rank waits at a barrier for its peers before the group gives up.
  std::chrono::milliseconds barrier_timeout = std::chrono::minutes(5);
  // Yield-spins before blocking in a barrier; trades CPU for wake-up latency.
  int spin_iterations = 64;
};

class InProcessGroup;

class InProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return rank_; }
  int world_size() const override;

  Status AllReduceSum(float* data, size_t n) override;
  Status AllReduceSum(double* data, size_t n) override;
  Status AllGather(const float* in, size_t n, float* out) override;
  Status Broadcast(float* data, size_t n, int root) override;
  Status Barrier() override;

 private:
  friend class InProcessGroup;
  InProcessCommunicator(InProcessGroup* group, int rank) : group_(group), rank_(rank) {}

  template <typename T>
  Status AllReduce(T* data, size_t n);
  template <typename T>
  void ReduceMySlice(size_t n);
  void GatherAll(size_t n, float* out);
  void CopyFromRoot(float* data, size_t n, int root);

  InProcessGroup* group_;
  int rank_;
};

class InProcessGroup {
 public:
  // world_size must be in [1, kMaxWorldSize].
  static StatusOr<std::unique_ptr<InProcessGroup>> Create(int world_size,
                                                          InProcessGroupOptions options = {});
  static constexpr int kMaxWorldSize = 64;

  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int world_size() const { return world_size_; }

  // The communicator of rank `rank`, owned by the group; nullptr outside [0, world_size).
  InProcessCommunicator* Rank(int rank) {
    return rank >= 0 && rank < world_size_ ? ranks_[rank].get() : nullptr;
  }

  // Breaks the group with `reason` (e.g. a rank failed to load its weights), waking every rank
  // blocked in a collective; they and all later calls return `reason`.
  void Abort(Status reason);

 private:
  friend class InProcessCommunicator;

  enum class Op { kAllReduceSum, kAllGather, kBroadcast, kBarrier };
  enum class Type { kFloat, kDouble };

  // What one rank published for the current collective. Cache-line aligned so ranks writing
  // their own slot do not invalidate each other's lines.
  struct alignas(64) Slot {
    Op op = Op::kBarrier;
    Type type = Type::kFloat;
    size_t n = 0;
    int root = 0;
    const float* in = nullptr;
    void* out = nullptr;                   // float*, or double* for a kDouble reduction
    const char* argument_error = nullptr;  // Static string when this rank's arguments are bad.
  };

  InProcessGroup(int world_size, InProcessGroupOptions options);

  // Runs one collective for `rank`: publish, barrier, agree, `work` (only if all agree), barrier.
  template <typename Work>
  Status Run(int rank, const Slot& mine, Work work);

  // Same verdict on every rank, since all read the same published slots.
  Status CheckAgreement() const;

  const int world_size_;
  GroupBarrier barrier_;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<InProcessCommunicator>> ranks_;
};

}  // namespace pdspark::parallel
