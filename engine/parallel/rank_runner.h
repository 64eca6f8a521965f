// The tensor-parallel ranks of one model replica in this process, shared by the target model and
// its DSpark drafter (docs/tensor_parallel.md): the rank threads, their in-process communicator
// group, and the group's fate. Both run their sharded work through Run, so a step and a draft
// never overlap, and a rank that fails mid-job breaks the group for both.
//
//   auto runner = RankRunner::Create(4).value();
//   RETURN_IF_ERROR(runner->RunIndependent(load_my_slice));   // no collectives
//   RETURN_IF_ERROR(runner->Run([&](int rank) { return Forward(rank, runner->comm(rank)); }));
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/base/status.h"
#include "engine/parallel/communicator.h"
#include "kernels/cpu/thread_pool.h"

namespace pdspark::parallel {

class InProcessGroup;
class RankThreads;

class RankRunner {
 public:
  using Job = std::function<Status(int rank)>;

  // world_size in [1, 64]. One rank runs on the caller's thread alone, with no communicator.
  // Each rank computes with `threads_per_rank` threads (its own thread included).
  static StatusOr<std::shared_ptr<RankRunner>> Create(int world_size, int threads_per_rank = 1);
  ~RankRunner();

  RankRunner(const RankRunner&) = delete;
  RankRunner& operator=(const RankRunner&) = delete;

  int world_size() const { return world_size_; }
  // Rank `rank`'s communicator; nullptr with one rank (nothing to reduce).
  Communicator* comm(int rank) const;
  // Rank `rank`'s compute threads, for the kernels it runs.
  kernels::cpu::ThreadPool* pool(int rank) const { return pools_[rank].get(); }

  // Runs job(rank) on every rank at once, rank 0 on the calling thread, and returns the lowest
  // failing rank's error. The jobs meet in collectives, so a failing rank aborts the group to
  // release the others; the runner then refuses every later Run with that error. Runs of
  // different callers are serialised.
  Status Run(const Job& job);
  // The same for jobs that never meet in collectives (loading a rank's weights): a failure is
  // returned and leaves the group usable.
  Status RunIndependent(const Job& job);
  // Called on a failing rank's thread when its Run job fails, after the in-process group was
  // aborted: what releases ranks waiting in collectives that group does not run (the GPUs' NCCL
  // communicators: Communicator::Abort). May run on several ranks at once. Set before Run.
  void SetOnFailure(std::function<void()> on_failure) { on_failure_ = std::move(on_failure); }

 private:
  explicit RankRunner(int world_size);

  const int world_size_;
  std::unique_ptr<InProcessGroup> group_;                         // world > 1
  std::unique_ptr<RankThreads> threads_;                          // world > 1
  std::vector<std::unique_ptr<kernels::cpu::ThreadPool>> pools_;  // per rank
  std::mutex mu_;                                                 // one job at a time
  Status broken_;                                                 // Guarded by mu_.
  std::function<void()> on_failure_;
};

}  // namespace pdspark::parallel
