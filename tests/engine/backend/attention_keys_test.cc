// AttentionKeys on the CPU backend: a query row's window run, then its entries run (all of them,
// or the indexer's selection), give the same bits as the same keys listed one by one; TopK
// writes each row's selection into backend memory and leaves the rest of the row alone.
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/ops.h"
#include "gtest/gtest.h"

namespace pdspark::engine::backend {
namespace {

constexpr int64_t kHeads = 2, kDim = 16;

std::vector<float> Random(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Every key of every query row as its own window run (the keys listed one by one).
AttentionKeys Listed(const std::vector<std::vector<const void*>>& per_row) {
  AttentionKeys keys;
  for (const std::vector<const void*>& row : per_row) {
    const int64_t begin = static_cast<int64_t>(keys.rows.size());
    keys.rows.insert(keys.rows.end(), row.begin(), row.end());
    keys.queries.push_back({{begin, static_cast<int64_t>(row.size())}, {}});
  }
  return keys;
}

class AttentionKeysTest : public ::testing::Test {
 protected:
  AttentionKeysTest() : rng_(5), pool_(Random(rng_, 20 * kDim)) {}
  const void* Key(int64_t i) const { return pool_.data() + i * kDim; }
  std::vector<float> Attend(const AttentionKeys& keys) {
    const std::vector<float> q = Random(rng_, keys.num_rows() * kHeads * kDim);
    const std::vector<float> sink = {0.5f, -1.0f};
    std::vector<float> out(q.size());
    backend_.ops().Attend(keys, q.data(), kHeads, kDim, sink.data(), out.data());
    return out;
  }
  std::vector<double> Scores(const AttentionKeys& keys) {
    const std::vector<float> q = Random(rng_, keys.num_rows() * kHeads * kDim);
    const std::vector<float> w = Random(rng_, keys.num_rows() * kHeads);
    std::vector<double> scores(keys.KeyOffsets().back());
    backend_.ops().IndexerScores(keys, q.data(), w.data(), kHeads, kDim, scores.data());
    return scores;
  }

  std::mt19937 rng_;
  std::vector<float> pool_;
  CpuBackend backend_{nullptr, nullptr};
};

TEST_F(AttentionKeysTest, RunsAndSelectionsReadTheKeysTheyName) {
  // Two query rows sharing one list: row 0's window is keys 0-2 and its entries 3-6; row 1's
  // window is keys 1-3 and its entries 3-8. Row 0 selects entries 2, 0 (k = 3 > 2 is padded),
  // row 1 entries 5, 1, 4.
  AttentionKeys keys;
  for (int64_t i = 0; i < 9; ++i) keys.rows.push_back(Key(i));
  keys.queries = {{{0, 3}, {3, 2}}, {{1, 3}, {3, 6}}};
  const std::vector<int32_t> selected = {1, 0, -1, 5, 1, 4};
  const std::vector<std::vector<const void*>> all = {
      {Key(0), Key(1), Key(2), Key(3), Key(4)},
      {Key(1), Key(2), Key(3), Key(3), Key(4), Key(5), Key(6), Key(7), Key(8)}};
  const std::vector<std::vector<const void*>> chosen = {
      {Key(0), Key(1), Key(2), Key(4), Key(3)}, {Key(1), Key(2), Key(3), Key(8), Key(4), Key(7)}};
  EXPECT_EQ(keys.KeyOffsets(), (std::vector<int64_t>{0, 5, 14}));

  std::mt19937 start = rng_;
  const std::vector<float> got_all = Attend(keys);
  rng_ = start;  // the same queries for the listed keys
  EXPECT_EQ(got_all, Attend(Listed(all)));
  start = rng_;
  const std::vector<double> scores = Scores(keys);
  rng_ = start;
  EXPECT_EQ(scores, Scores(Listed(all)));

  keys.selected = selected.data();
  keys.select_k = 3;
  EXPECT_EQ(keys.KeyOffsets(), (std::vector<int64_t>{0, 5, 11}));
  start = rng_;
  const std::vector<float> got_chosen = Attend(keys);
  rng_ = start;
  EXPECT_EQ(got_chosen, Attend(Listed(chosen)));
  EXPECT_NE(got_chosen, got_all);
}

TEST_F(AttentionKeysTest, TopKWritesEachRowsSelectionAndLeavesTheRestOfTheRow) {
  // Rows of 4, 0 and 2 values; k = 3, ties to the lower index.
  const std::vector<float> values = {1.0f,  3.0f, 3.0f,
                                     -1.0f, 2.0f, std::numeric_limits<float>::lowest()};
  std::vector<int32_t> out(9, -7);
  backend_.ops().TopK(values.data(), {0, 4, 4, 6}, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 0, -7, -7, -7, 0, 1, -7}));
}

}  // namespace
}  // namespace pdspark::engine::backend
