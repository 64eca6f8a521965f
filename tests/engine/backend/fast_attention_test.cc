// The CPU backend's Attend under the fast kernels (CpuOps::set_fast_kernels): scores and weighted
// sums as fp32 GEMMs instead of double-precision dots. It stays within fp32 rounding of the
// exact kernels' attention, and keeps their invariances: a row's output is the same bits alone
// or in a batch, on one thread or several.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "gtest/gtest.h"
#include "kernels/cpu/fp8_kv_row.h"
#include "kernels/cpu/thread_pool.h"

namespace pdspark::engine::backend {
namespace {

namespace kc = ::pdspark::kernels::cpu;

constexpr int64_t kHeads = 5, kDim = 48, kPoolRows = 150;
// Keys per query row: none (the sink alone), one, and windows of a decode step's size.
const std::vector<int64_t> kCounts = {1, 0, 5, 37, 130, 2};

std::vector<float> Uniform(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A cache of kPoolRows keys (fp32 rows, or FP8 rows when fp8.head_dim > 0) and query rows that
// each read kCounts[r] of them, picked at random: a third as the window, the rest as entries.
struct Cache {
  Cache(const kc::Fp8KvRow& fp8, std::mt19937& rng) {
    const std::vector<float> values = Uniform(rng, kPoolRows * kDim);
    row_bytes = fp8.head_dim > 0 ? fp8.bytes() : kDim * static_cast<int64_t>(sizeof(float));
    bytes.resize(kPoolRows * row_bytes);
    for (int64_t i = 0; i < kPoolRows; ++i) {
      if (fp8.head_dim > 0) {
        fp8.Encode(values.data() + i * kDim, bytes.data() + i * row_bytes);
      } else {
        std::memcpy(bytes.data() + i * row_bytes, values.data() + i * kDim, row_bytes);
      }
    }
    keys.fp8 = fp8;
    std::uniform_int_distribution<int64_t> pick(0, kPoolRows - 1);
    for (const int64_t count : kCounts) {
      const int64_t begin = static_cast<int64_t>(keys.rows.size()), window = count / 3;
      for (int64_t j = 0; j < count; ++j) keys.rows.push_back(bytes.data() + pick(rng) * row_bytes);
      keys.queries.push_back({{begin, window}, {begin + window, count - window}});
    }
  }
  // Query row r alone.
  AttentionKeys Row(int64_t r) const {
    AttentionKeys one = keys;
    one.queries = {keys.queries[r]};
    return one;
  }

  int64_t row_bytes = 0;
  std::vector<uint8_t> bytes;
  AttentionKeys keys;
};

std::vector<float> Attend(const AttentionKeys& keys, const std::vector<float>& q,
                          const std::vector<float>& sink, bool fast, int threads) {
  kc::ThreadPool pool(threads);
  CpuOps ops(&pool);
  ops.set_fast_kernels(fast);
  std::vector<float> out(keys.num_rows() * kHeads * kDim);
  ops.Attend(keys, q.data(), kHeads, kDim, sink.data(), out.data());
  return out;
}

class FastAttentionTest : public ::testing::TestWithParam<kc::Fp8KvRow> {};

TEST_P(FastAttentionTest, StaysWithinFp32RoundingOfTheExactAttention) {
  std::mt19937 rng(11);
  const Cache cache(GetParam(), rng);
  const std::vector<float> q = Uniform(rng, kCounts.size() * kHeads * kDim);
  const std::vector<float> sink = Uniform(rng, kHeads);
  const std::vector<float> exact = Attend(cache.keys, q, sink, /*fast=*/false, 1);
  const std::vector<float> fast = Attend(cache.keys, q, sink, /*fast=*/true, 1);
  // A score sums 48 products of values within +-2, scaled by 1/sqrt(48). Rounded in fp32 with
  // random signs, the error grows like sqrt(48) ulps of the terms: about 2e-7 in a score, the
  // same relative error in its weight, and a few times that in an output (a weighted mean of
  // values within +-2). 2e-6 leaves 10x room; a scale off by 1e-4 or a wrong key or head moves
  // outputs by 1e-4 or more.
  double max_error = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    max_error = std::max(max_error, std::fabs(static_cast<double>(fast[i]) - exact[i]));
  }
  EXPECT_LT(max_error, 2e-6);
  EXPECT_GT(max_error, 0.0) << "the fast kernels' attention did not run";
  // The row without keys attends to its sink alone: zeros, as in the exact kernels.
  for (int64_t c = 0; c < kHeads * kDim; ++c) EXPECT_EQ(fast[kHeads * kDim + c], 0.0f);
}

TEST_P(FastAttentionTest, GivesTheSameBitsAloneOrInABatchOnAnyThreads) {
  std::mt19937 rng(12);
  const Cache cache(GetParam(), rng);
  const std::vector<float> q = Uniform(rng, kCounts.size() * kHeads * kDim);
  const std::vector<float> sink = Uniform(rng, kHeads);
  const std::vector<float> batch = Attend(cache.keys, q, sink, /*fast=*/true, 1);
  EXPECT_EQ(Attend(cache.keys, q, sink, /*fast=*/true, 2), batch);
  EXPECT_EQ(Attend(cache.keys, q, sink, /*fast=*/true, 3), batch);
  const int64_t width = kHeads * kDim;
  for (size_t r = 0; r < kCounts.size(); ++r) {
    const std::vector<float> q_row(q.begin() + r * width, q.begin() + (r + 1) * width);
    for (const int threads : {1, 2}) {
      EXPECT_EQ(Attend(cache.Row(r), q_row, sink, /*fast=*/true, threads),
                std::vector<float>(batch.begin() + r * width, batch.begin() + (r + 1) * width))
          << "row " << r << ", " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, FastAttentionTest,
                         ::testing::Values(kc::Fp8KvRow{}, kc::Fp8KvRow{kDim, 32, 16}),
                         [](const auto& info) { return info.param.head_dim ? "Fp8" : "Fp32"; });

}  // namespace
}  // namespace pdspark::engine::backend
