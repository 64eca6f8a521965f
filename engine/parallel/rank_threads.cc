#include "engine/parallel/rank_threads.h"

namespace pdspark::parallel {

RankThreads::RankThreads(int world_size) : world_size_(world_size), results_(world_size) {
  for (int r = 1; r < world_size_; ++r) threads_.emplace_back([this, r] { Worker(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Status RankThreads::Run(const Job& job) {
  {
    std::lock_guard lock(mu_);
    job_ = &job;
    running_ = world_size_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  results_[0] = job(0);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [this] { return running_ == 0; });
  job_ = nullptr;
  for (const Status& st : results_) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

void RankThreads::Worker(int rank) {
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  while (true) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const Job* job = job_;
    lock.unlock();
    Status st = (*job)(rank);
    lock.lock();
    results_[rank] = std::move(st);
    if (--running_ == 0) done_cv_.notify_one();
  }
}

}  // namespace pdspark::parallel
