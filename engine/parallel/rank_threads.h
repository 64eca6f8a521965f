// The threads of an in-process tensor-parallel group: rank 0 is the caller's thread, ranks
// 1..N-1 are persistent threads that wait for the next job (one model step, or loading the
// rank's weights), so a step costs a wake-up instead of a thread start.
//
//   RankThreads threads(4);
//   Status st = threads.Run([&](int rank) { return RunMyShard(rank); });
//
// Run returns once every rank's job has returned; the jobs of one Run are expected to meet in
// collectives, so a job that fails early must break its group (InProcessGroup::Abort) to release
// the others.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/base/status.h"

namespace pdspark::parallel {

class RankThreads {
 public:
  using Job = std::function<Status(int rank)>;

  explicit RankThreads(int world_size);
  ~RankThreads();  // joins the threads (after the current Run, if any)

  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world_size() const { return world_size_; }

  // Runs job(r) for every rank r at once, job(0) on the calling thread. Returns the error of the
  // lowest failing rank, else OK. One Run at a time.
  Status Run(const Job& job);

 private:
  void Worker(int rank);

  const int world_size_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const Job* job_ = nullptr;  // Guarded by mu_.
  uint64_t generation_ = 0;   // Guarded by mu_; bumped by every Run.
  int running_ = 0;           // Guarded by mu_; workers still inside the current job.
  bool stop_ = false;         // Guarded by mu_.
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

}  // namespace pdspark::parallel
