#include "engine/parallel/rank_threads.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::parallel {
namespace {

TEST(RankThreadsTest, RunsEveryRankOnceWithRankZeroOnTheCaller) {
  for (int world : {1, 2, 8}) {
    RankThreads threads(world);
    for (int round = 0; round < 50; ++round) {
      std::vector<std::thread::id> ids(world);
      std::vector<int> calls(world, 0);
      ASSERT_TRUE(threads
                      .Run([&](int rank) {
                        ids[rank] = std::this_thread::get_id();
                        ++calls[rank];
                        return absl::OkStatus();
                      })
                      .ok());
      EXPECT_EQ(ids[0], std::this_thread::get_id());
      for (int r = 0; r < world; ++r) EXPECT_EQ(calls[r], 1);
      for (int r = 1; r < world; ++r) EXPECT_NE(ids[r], ids[0]);
    }
  }
}

TEST(RankThreadsTest, RunWaitsForEveryRankAndReportsTheLowestFailingRank) {
  RankThreads threads(4);
  std::atomic<int> finished{0};
  const Status st = threads.Run([&](int rank) -> Status {
    if (rank == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ++finished;
    if (rank >= 2) return absl::InternalError("rank " + std::to_string(rank));
    return absl::OkStatus();
  });
  EXPECT_EQ(finished.load(), 4);  // rank 3's slow job finished before Run returned
  EXPECT_EQ(st.message(), "rank 2");
  // The threads are still usable.
  EXPECT_TRUE(threads.Run([](int) { return absl::OkStatus(); }).ok());
}

}  // namespace
}  // namespace pdspark::parallel
