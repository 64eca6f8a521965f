#include "engine/parallel/replica_check.h"

#include <cmath>
#include <thread>
#include <vector>

#include "engine/parallel/in_process_communicator.h"
#include "gtest/gtest.h"

namespace pdspark::parallel {
namespace {

// Each rank's verdict on a buffer equal to rank 0's except, on `odd_rank`, one element one ulp
// away. The rank threads write their verdicts as chars: std::vector<bool> packs its elements
// into shared words, and two threads setting two of them race (a CI run lost rank 1's `true`).
std::vector<bool> Verdicts(int world, int odd_rank) {
  auto group = InProcessGroup::Create(world).value();
  std::vector<char> same(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> data(1000);
      for (size_t i = 0; i < data.size(); ++i) data[i] = 0.001f * static_cast<float>(i);
      if (r == odd_rank) data[517] = std::nextafter(data[517], 1.0f);
      auto result = SameAsRankZero(*group->Rank(r), data.data(), data.size());
      ASSERT_TRUE(result.ok()) << result.status();
      same[r] = *result;
    });
  }
  for (std::thread& t : threads) t.join();
  return std::vector<bool>(same.begin(), same.end());
}

TEST(SameAsRankZeroTest, FindsAOneUlpDifferenceOnTheRankThatHasIt) {
  EXPECT_EQ(Verdicts(4, -1), std::vector<bool>({true, true, true, true}));
  EXPECT_EQ(Verdicts(4, 2), std::vector<bool>({true, true, false, true}));
  // A different rank 0 makes every other rank differ.
  EXPECT_EQ(Verdicts(3, 0), std::vector<bool>({true, false, false}));
}

}  // namespace
}  // namespace pdspark::parallel
