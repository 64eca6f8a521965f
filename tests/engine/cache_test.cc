#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/paged_rows.h"
#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

TEST(PagedRows, AppendTruncateRelease) {
  CachePools pools(4);
  {
    PagedRows rows(&pools.ForGroup("g", 2));
    for (int i = 0; i < 10; ++i) {
      float* r = rows.Append();
      r[0] = i;
      r[1] = -i;
    }
    EXPECT_EQ(rows.size(), 10);
    EXPECT_EQ(pools.blocks_in_use(), 3);  // 4 + 4 + 2 rows
    EXPECT_EQ(rows.Row(9)[1], -9.0f);
    rows.ReleaseBelow(8);  // blocks [0,4) and [4,8) go
    EXPECT_EQ(rows.first_row(), 8);
    EXPECT_EQ(pools.blocks_in_use(), 1);
    EXPECT_EQ(rows.Row(8)[0], 8.0f);
    rows.Truncate(9);
    EXPECT_EQ(rows.size(), 9);
    EXPECT_EQ(rows.Append()[0], 9.0f);  // stale contents are the caller's to overwrite
    EXPECT_EQ(rows.bytes(), 4 * 2 * 4);
  }
  EXPECT_EQ(pools.blocks_in_use(), 0);  // destruction frees everything
}

TEST(PagedRows, SerialiseRoundTripKeepsLogicalIndices) {
  CachePools pools(4);
  PagedRows rows(&pools.ForGroup("g", 3));
  for (int i = 0; i < 11; ++i) rows.Append()[2] = static_cast<float>(i);
  rows.ReleaseBelow(5);
  std::string bytes;
  rows.AppendTo(bytes);
  PagedRows copy(&pools.ForGroup("g", 3));
  size_t offset = 0;
  ASSERT_TRUE(copy.ReadFrom(bytes, offset).ok());
  EXPECT_EQ(offset, bytes.size());
  EXPECT_EQ(copy.size(), 11);
  EXPECT_EQ(copy.first_row(), rows.first_row());
  for (int i = rows.first_row(); i < 11; ++i) EXPECT_EQ(copy.Row(i)[2], static_cast<float>(i));
  std::string truncated = bytes.substr(0, bytes.size() - 1);
  offset = 0;
  EXPECT_FALSE(copy.ReadFrom(truncated, offset).ok());
}

}  // namespace
}  // namespace pdspark::engine
