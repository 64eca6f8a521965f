#include "engine/parallel/partition.h"

#include <gtest/gtest.h>

namespace pdspark::parallel {
namespace {

TEST(EvenSplitTest, CoversEveryItemOnceInRankOrder) {
  for (int64_t n : {0, 1, 2, 4, 7, 8, 64}) {
    for (int world : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const Range range = EvenSplit(n, r, world);
        EXPECT_EQ(range.begin, next) << n << " " << world << " " << r;
        EXPECT_GE(range.size(), n / world);
        EXPECT_LE(range.size(), n / world + 1);
        next = range.end;
      }
      EXPECT_EQ(next, n) << n << " " << world;
    }
  }
}

TEST(EvenSplitTest, FourHeadsOverEightRanksLeavesRanksEmpty) {
  EXPECT_EQ(EvenSplit(4, 3, 8).size(), 1);
  EXPECT_EQ(EvenSplit(4, 3, 8).begin, 3);
  EXPECT_TRUE(EvenSplit(4, 4, 8).empty());
  EXPECT_TRUE(EvenSplit(4, 7, 8).empty());
  EXPECT_EQ(EvenSplit(7, 0, 2).size(), 4);
  EXPECT_EQ(EvenSplit(7, 1, 2).size(), 3);
}

}  // namespace
}  // namespace pdspark::parallel
