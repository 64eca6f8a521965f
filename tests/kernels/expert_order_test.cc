// kernels/expert_order.h, the device's grouping of a MoE layer's choices by expert, against the
// CPU backend's order (cpu_moe.cc): one job per local expert in ascending expert order, its rows
// ascending, each row's outputs added in job order. The stable sort is std::stable_sort here,
// CUB's stable radix sort on the device.
#include "kernels/expert_order.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::kernels {
namespace {

struct Choices {
  int64_t rows = 0;
  int k = 0;
  std::vector<int32_t> chosen;  // [rows, k]
};

// Random choices of `experts` experts, distinct per row unless `repeats` (hash tables may).
Choices RandomChoices(std::mt19937& rng, int64_t rows, int k, int experts, bool repeats) {
  Choices c{rows, k, {}};
  std::vector<int32_t> ids(experts);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int s = 0; s < k; ++s) {
      c.chosen.push_back(repeats ? static_cast<int32_t>(rng() % experts) : ids[s]);
    }
  }
  return c;
}

// The CPU's jobs: per local expert (ascending) the entries r * k + s that chose it, r ascending.
std::vector<std::vector<int64_t>> CpuJobs(const Choices& c, int64_t first, int64_t count) {
  std::vector<std::vector<int64_t>> jobs(count);
  for (int64_t e = 0; e < count; ++e) {
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int s = 0; s < c.k; ++s) {
        if (c.chosen[r * c.k + s] == first + e) jobs[e].push_back(r * c.k + s);
      }
    }
  }
  return jobs;
}

void ExpectTheCpusOrder(const Choices& c, int64_t first, int64_t count) {
  const int64_t n = c.rows * c.k;
  std::vector<int32_t> keys(n);
  std::vector<int64_t> entries(n);
  for (int64_t i = 0; i < n; ++i) keys[i] = ExpertKey(c.chosen[i], first, count);
  std::iota(entries.begin(), entries.end(), 0);
  std::stable_sort(entries.begin(), entries.end(),
                   [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  std::vector<int32_t> sorted(n);
  for (int64_t p = 0; p < n; ++p) sorted[p] = keys[entries[p]];
  std::vector<int32_t> starts(count + 1, -1);
  for (int64_t p = 0; p <= n; ++p) SetSegmentStarts(sorted.data(), n, p, count, starts.data());

  // Each segment is the CPU job's entries, in its order.
  const auto jobs = CpuJobs(c, first, count);
  for (int64_t e = 0; e < count; ++e) {
    ASSERT_GE(starts[e], 0) << "expert " << e << " has no start";
    const std::vector<int64_t> segment(entries.begin() + starts[e],
                                       entries.begin() + starts[e + 1]);
    EXPECT_EQ(segment, jobs[e]) << "local expert " << e;
  }
  EXPECT_EQ(starts[count], std::accumulate(jobs.begin(), jobs.end(), int64_t{0},
                                           [](int64_t t, const auto& j) { return t + j.size(); }));

  // Each row adds its outputs in the CPU's job order.
  for (int64_t r = 0; r < c.rows; ++r) {
    std::vector<int64_t> cpu;
    for (const auto& job : jobs) {
      for (int64_t i : job) {
        if (i / c.k == r) cpu.push_back(i);
      }
    }
    std::vector<int> order(c.k);
    const int m = RowAddOrder(c.chosen.data() + r * c.k, c.k, first, count, order.data());
    std::vector<int64_t> device;
    for (int i = 0; i < m; ++i) device.push_back(r * c.k + order[i]);
    EXPECT_EQ(device, cpu) << "row " << r;
  }
}

TEST(ExpertOrderTest, OneRankHoldingEveryExpert) {
  std::mt19937 rng(1);
  ExpectTheCpusOrder(RandomChoices(rng, 37, 6, 64, false), 0, 64);
  ExpectTheCpusOrder(RandomChoices(rng, 1, 8, 256, false), 0, 256);
}

TEST(ExpertOrderTest, ARanksShareSkipsTheOtherRanksExperts) {
  std::mt19937 rng(2);
  const Choices c = RandomChoices(rng, 50, 6, 64, false);
  for (int64_t first : {0, 16, 32, 48}) ExpectTheCpusOrder(c, first, 16);
}

TEST(ExpertOrderTest, RepeatedExpertsInARowAddInSlotOrder) {
  std::mt19937 rng(3);
  ExpectTheCpusOrder(RandomChoices(rng, 40, 4, 5, true), 0, 5);
  ExpectTheCpusOrder(RandomChoices(rng, 40, 4, 5, true), 2, 2);
  const Choices same{2, 3, {4, 4, 1, 3, 3, 3}};
  ExpectTheCpusOrder(same, 0, 8);
}

TEST(ExpertOrderTest, ExpertsNoRowChoseGetEmptySegments) {
  const Choices c{3, 2, {5, 1, 1, 5, 9, 5}};
  ExpectTheCpusOrder(c, 0, 12);  // experts 0, 2-4, 6-8, 10-11 unchosen; 12 past the last
  ExpectTheCpusOrder(c, 6, 3);   // a rank whose experts nobody chose
  std::vector<int32_t> sorted = {0, 0, 3, 3};
  std::vector<int32_t> starts(6, -1);
  for (int64_t p = 0; p <= 4; ++p) SetSegmentStarts(sorted.data(), 4, p, 5, starts.data());
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 2, 2, 2, 4, 4}));
}

}  // namespace
}  // namespace pdspark::kernels
