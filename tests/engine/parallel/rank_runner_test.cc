// RankRunner: the ranks the target model and its DSpark drafter share. One rank runs on the
// caller without a communicator; a failing collective job releases its peers and breaks the
// runner for every later job (a drafter must not run on a group a failed step left behind),
// while a failing independent job (loading) leaves it usable.
#include "engine/parallel/rank_runner.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace pdspark::parallel {
namespace {

TEST(RankRunnerTest, RejectsSizesOutsideTheGroupRange) {
  for (int world : {0, -1, 65}) {
    EXPECT_EQ(RankRunner::Create(world).status().code(), absl::StatusCode::kInvalidArgument)
        << world;
  }
}

TEST(RankRunnerTest, OneRankRunsOnTheCallerWithoutACommunicator) {
  auto runner = RankRunner::Create(1).value();
  EXPECT_EQ(runner->comm(0), nullptr);
  std::thread::id ran_on;
  ASSERT_TRUE(runner
                  ->Run([&](int rank) {
                    EXPECT_EQ(rank, 0);
                    ran_on = std::this_thread::get_id();
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(RankRunnerTest, AFailedCollectiveJobBreaksTheRunnerForGood) {
  auto runner = RankRunner::Create(4).value();
  // Ranks 0-2 wait in a barrier that rank 3 never reaches: the abort must release them.
  const Status failed = runner->Run([&](int rank) -> Status {
    if (rank == 3) return absl::InternalError("rank 3 failed");
    return runner->comm(rank)->Barrier();
  });
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  int ran = 0;
  const Status later = runner->Run([&](int) {
    ++ran;
    return absl::OkStatus();
  });
  EXPECT_EQ(later, failed);
  EXPECT_EQ(ran, 0);
}

// Ranks waiting in collectives the in-process group does not run (NCCL's, on GPUs) are released
// by the failure hook (Communicator::Abort), never left waiting; a run that succeeds calls none.
TEST(RankRunnerTest, AFailingRankReleasesCollectivesOutsideTheGroup) {
  auto runner = RankRunner::Create(3).value();
  std::atomic<bool> released{false};
  std::atomic<int> calls{0};
  runner->SetOnFailure([&] {
    released = true;
    ++calls;
  });
  ASSERT_TRUE(runner->Run([](int) { return absl::OkStatus(); }).ok());
  EXPECT_EQ(calls, 0);
  const Status failed = runner->Run([&](int rank) -> Status {
    if (rank == 2) return absl::InternalError("rank 2 failed");
    while (!released) std::this_thread::yield();  // a collective rank 2 never joins
    return absl::AbortedError("collective aborted");
  });
  EXPECT_FALSE(failed.ok());
  EXPECT_GE(calls, 1);
}

TEST(RankRunnerTest, AFailedIndependentJobLeavesTheRunnerUsable) {
  auto runner = RankRunner::Create(2).value();
  EXPECT_FALSE(runner
                   ->RunIndependent([](int rank) {
                     return rank == 1 ? absl::NotFoundError("no slice") : absl::OkStatus();
                   })
                   .ok());
  std::vector<double> sums(2);
  ASSERT_TRUE(runner
                  ->Run([&](int rank) {
                    sums[rank] = rank + 1.0;
                    return runner->comm(rank)->AllReduceSum(&sums[rank], 1);
                  })
                  .ok());
  EXPECT_EQ(sums[0], 3.0);
  EXPECT_EQ(sums[1], 3.0);
}

}  // namespace
}  // namespace pdspark::parallel
