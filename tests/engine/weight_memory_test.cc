// Weight memory: large matrices come from 2 MiB-aligned arenas advised for huge pages, small
// ones from the heap; arenas are unmapped once nothing in them is live; values survive.
#include "engine/model/weight_memory.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::engine {
namespace {

// The VmFlags line of the mapping that contains `p` in /proc/self/smaps ("" if none).
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(WeightMemoryTest, LargeMatricesLiveInHugePageAdvisedArenas) {
  const size_t before = WeightArenaBytes();
  WeightVector big(1 << 20);  // 4 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  EXPECT_GE(WeightArenaBytes(), before + (size_t{4} << 20));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % 64, 0u);
  const std::string flags = VmFlagsOf(big.data());
  ASSERT_FALSE(flags.empty()) << "no mapping found in /proc/self/smaps";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << "not advised for huge pages: " << flags;
  EXPECT_EQ(big[123456], 123456.0f);
}

TEST(WeightMemoryTest, HugePagesCanBeSwitchedOff) {
  SetWeightHugePages(false);
  WeightVector big(1 << 20);
  SetWeightHugePages(true);
  EXPECT_EQ(VmFlagsOf(big.data()).find(" hg"), std::string::npos);
}

TEST(WeightMemoryTest, SmallMatricesStayOnTheHeap) {
  const size_t before = WeightArenaBytes();
  WeightVector small(1000);
  EXPECT_EQ(WeightArenaBytes(), before);
  EXPECT_EQ(VmFlagsOf(small.data()).find(" hg"), std::string::npos);
}

TEST(WeightMemoryTest, ArenasAreUnmappedWhenEmptied) {
  {
    std::vector<WeightVector> matrices;
    for (int i = 0; i < 12; ++i) matrices.emplace_back(size_t{1} << 20, 1.0f);  // 48 MiB
    EXPECT_GE(WeightArenaBytes(), size_t{48} << 20);
    for (const WeightVector& m : matrices) EXPECT_EQ(m.back(), 1.0f);
  }
  // Nothing else in this test is live.
  EXPECT_EQ(WeightArenaBytes(), 0u);
}

}  // namespace
}  // namespace pdspark::engine
