#include "engine/parallel/group_barrier.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::parallel {
namespace {

using std::chrono::milliseconds;

TEST(GroupBarrierTest, SinglePartyNeverBlocks) {
  GroupBarrier barrier(1, milliseconds(10), 0);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(barrier.Wait().ok());
}

TEST(GroupBarrierTest, NoThreadPassesBeforeAllArriveAcrossManyRounds) {
  for (int spin : {0, 64}) {
    constexpr int kThreads = 8;
    constexpr int kRounds = 2000;
    GroupBarrier barrier(kThreads, milliseconds(30000), spin);
    std::atomic<int> arrivals{0};
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int round = 0; round < kRounds; ++round) {
          arrivals.fetch_add(1);
          if (!barrier.Wait().ok()) failed = true;
          // Everyone of this round has arrived, and nobody can have arrived for the round
          // after next before we reach the second barrier.
          const int seen = arrivals.load();
          if (seen < (round + 1) * kThreads || seen > (round + 2) * kThreads) failed = true;
          if (!barrier.Wait().ok()) failed = true;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_FALSE(failed) << "spin " << spin;
    EXPECT_EQ(arrivals.load(), kThreads * kRounds);
  }
}

TEST(GroupBarrierTest, TimesOutAndStaysBroken) {
  GroupBarrier barrier(2, milliseconds(100), 8);
  const auto start = std::chrono::steady_clock::now();
  const Status status = barrier.Wait();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(waited, milliseconds(100));
  EXPECT_LT(waited, milliseconds(5000));
  // The late peer and any later round fail fast with the same error.
  EXPECT_EQ(barrier.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(barrier.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(GroupBarrierTest, BreakWakesWaiters) {
  GroupBarrier barrier(3, milliseconds(60000), 0);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back([&, t] { results[t] = barrier.Wait(); });
  std::this_thread::sleep_for(milliseconds(50));
  barrier.Break(absl::AbortedError("rank 2 failed"));
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  // The first reason sticks.
  barrier.Break(absl::InternalError("later"));
  EXPECT_EQ(barrier.Wait().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace pdspark::parallel
