#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pdspark::kernels::cpu {
namespace {

// How long a worker spins before it sleeps: longer than the gap between the parallel regions of
// one model step, far shorter than the gap between the steps of an idle engine.
constexpr auto kSpinTime = std::chrono::microseconds(100);

thread_local bool in_pool_task = false;

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spins until done() or kSpinTime has passed; true when done() holds.
template <class Done>
bool SpinUntil(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  while (!done()) {
    for (int i = 0; i < 16; ++i) CpuRelax();
    if (std::chrono::steady_clock::now() > deadline) return done();
  }
  return true;
}

constexpr uint64_t Pack(uint32_t job, uint32_t next) {
  return (static_cast<uint64_t>(job) << 32) | next;
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  published_.fetch_add(1);
  published_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t tasks, const std::function<void(int64_t)>& task) {
  if (tasks <= 0) return;
  std::unique_lock lock(caller_, std::defer_lock);
  if (workers_.empty() || tasks == 1 || in_pool_task || !lock.try_lock()) {
    for (int64_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  const uint32_t job = published_.load(std::memory_order_relaxed) + 1;
  Job& slot = jobs_[job & 1];
  slot.task.store(&task);
  slot.tasks.store(tasks);
  slot.done.store(0);
  work_.store(Pack(job, 0));
  published_.store(job);
  if (sleepers_.load() > 0) published_.notify_all();
  RunTasks(job);
  auto all_done = [&] { return slot.done.load(std::memory_order_acquire) >= tasks; };
  // A worker still holding a task after the spin was descheduled: give up the core to it.
  while (!SpinUntil(all_done)) std::this_thread::yield();
}

void ThreadPool::RunTasks(uint32_t job) {
  Job& slot = jobs_[job & 1];
  in_pool_task = true;
  uint64_t current = work_.load();
  while (static_cast<uint32_t>(current >> 32) == job) {
    const int64_t next = static_cast<uint32_t>(current);
    if (next >= slot.tasks.load()) break;
    if (!work_.compare_exchange_weak(current, Pack(job, static_cast<uint32_t>(next + 1)))) {
      continue;  // another thread claimed it, or the job moved on: `current` is reloaded
    }
    (*slot.task.load())(next);
    slot.done.fetch_add(1, std::memory_order_release);
    current = work_.load();
  }
  in_pool_task = false;
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = 0;
  while (true) {
    if (!SpinUntil([&] { return published_.load() != seen; })) {
      sleepers_.fetch_add(1);
      published_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    const uint32_t job = published_.load();
    if (stop_.load()) return;
    seen = job;
    RunTasks(job);
  }
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace pdspark::kernels::cpu
