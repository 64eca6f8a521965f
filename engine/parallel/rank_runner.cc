#include "engine/parallel/rank_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/parallel/in_process_communicator.h"
#include "engine/parallel/rank_threads.h"

namespace pdspark::parallel {

StatusOr<std::shared_ptr<RankRunner>> RankRunner::Create(int world_size, int threads_per_rank) {
  if (world_size < 1 || world_size > InProcessGroup::kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("rank runner: world size must be in [1, ",
                                                   InProcessGroup::kMaxWorldSize, "], got ",
                                                   world_size));
  }
  std::shared_ptr<RankRunner> runner(new RankRunner(world_size));
  for (int r = 0; r < world_size; ++r) {
    runner->pools_.push_back(
        std::make_unique<kernels::cpu::ThreadPool>(std::max(1, threads_per_rank)));
  }
  if (world_size > 1) {
    ASSIGN_OR_RETURN(runner->group_, InProcessGroup::Create(world_size));
    runner->threads_ = std::make_unique<RankThreads>(world_size);
  }
  return runner;
}

RankRunner::RankRunner(int world_size) : world_size_(world_size) {}

RankRunner::~RankRunner() = default;

Communicator* RankRunner::comm(int rank) const { return group_ ? group_->Rank(rank) : nullptr; }

Status RankRunner::Run(const Job& job) {
  std::lock_guard lock(mu_);
  if (!threads_) return job(0);
  RETURN_IF_ERROR(broken_);
  Status st = threads_->Run([&](int rank) {
    Status rank_status = job(rank);
    if (!rank_status.ok()) {
      group_->Abort(rank_status);
      if (on_failure_) on_failure_();
    }
    return rank_status;
  });
  if (!st.ok()) broken_ = st;
  return st;
}

Status RankRunner::RunIndependent(const Job& job) {
  std::lock_guard lock(mu_);
  return threads_ ? threads_->Run(job) : job(0);
}

}  // namespace pdspark::parallel
