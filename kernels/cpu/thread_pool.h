// A small pool of compute threads for the CPU kernels: the caller's thread plus `threads - 1`
// workers that run the tasks of one ParallelFor at a time.
//
// Why not OpenMP or TBB: a decode step runs a few hundred parallel regions of 10-50 us each, so
// the hand-off must cost about a microsecond. Workers spin briefly on the job counter before
// they sleep on it (std::atomic::wait, a futex), so back-to-back regions never pay a wake-up,
// and an idle engine burns no CPU. Tasks are handed out one at a time from a shared counter and
// the caller never waits for a worker that has nothing left to do, so a core taken by another
// process slows a region down instead of stalling it.
//
// Results never depend on the number of threads: kernels give every task a disjoint set of
// outputs computed by the same operations whichever thread runs it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pdspark::kernels::cpu {

class ThreadPool {
 public:
  // threads >= 1; threads == 1 runs everything on the caller's thread.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(i) for every i in [0, tasks) and returns when all have finished. The caller's
  // thread takes part. A call from inside a task, or while another thread's call is running,
  // runs its tasks inline on the calling thread.
  void ParallelFor(int64_t tasks, const std::function<void(int64_t)>& task);

 private:
  // Jobs alternate between two slots, so a worker still looking at the previous job never
  // reads a half-written one; a task is claimed by a compare-and-swap on `work_`, which holds
  // the job number and the next task index, so a late worker can never claim a task of a job
  // that has moved on.
  struct Job {
    std::atomic<const std::function<void(int64_t)>*> task{nullptr};
    std::atomic<int64_t> tasks{0};
    std::atomic<int64_t> done{0};
  };

  void WorkerLoop();
  // Claims and runs tasks of job `job` until none is left.
  void RunTasks(uint32_t job);

  std::vector<std::thread> workers_;
  std::mutex caller_;  // one ParallelFor at a time hands out work
  Job jobs_[2];
  std::atomic<uint64_t> work_{0};       // job << 32 | next task index
  std::atomic<uint32_t> published_{0};  // the latest job; workers wait on it
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

// Threads a compute pool should have by default: the cores this process may run on
// (sched_getaffinity, so a container's CPU set or `taskset` is respected).
int AvailableCores();

}  // namespace pdspark::kernels::cpu
