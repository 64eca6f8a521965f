// kernels/gumbel_sampling.h on the host: Philox4x32-10 against Random123's known answers, and
// the Gumbel-max draw against the softmax it samples from.
#include "kernels/gumbel_sampling.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gumbel_scan.h"
#include "kernels/sampling_cut.h"

namespace pdspark::kernels {
namespace {

// Random123's tests/kat_vectors, "philox4x32 10" lines: counter, key, output.
TEST(GumbelSamplingTest, PhiloxMatchesRandom123sKnownAnswers) {
  struct Vector {
    uint32_t counter[4], key[2], out[4];
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Vector& v : vectors) {
    uint32_t c[4] = {v.counter[0], v.counter[1], v.counter[2], v.counter[3]};
    Philox4x32_10(c, v.key[0], v.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], v.out[i]) << "word " << i;
  }
}

// The extreme uniforms give finite noise within kMaxGumbelNoise: with 53 bits centred in their
// bucket the largest rounded to u = 1 and gave +inf, a token that wins whatever its logit.
TEST(GumbelSamplingTest, NoiseIsFiniteAndBoundedAtTheExtremeBits) {
  const double top = GumbelOfBits((uint64_t{1} << 52) - 1), bottom = GumbelOfBits(0);
  EXPECT_TRUE(std::isfinite(top));
  EXPECT_TRUE(std::isfinite(bottom));
  EXPECT_LT(top, kMaxGumbelNoise);
  EXPECT_GT(top, 36.7);
  EXPECT_NEAR(bottom, -3.61, 0.01);
  EXPECT_LT(GumbelOfBits((uint64_t{1} << 52) - 2), top);  // monotonic in the bits
}

TEST(GumbelSamplingTest, NoiseDependsOnSeedCounterAndTokenOnly) {
  EXPECT_EQ(GumbelNoise(7, 3, 100), GumbelNoise(7, 3, 100));
  EXPECT_NE(GumbelNoise(7, 3, 100), GumbelNoise(8, 3, 100));
  EXPECT_NE(GumbelNoise(7, 3, 100), GumbelNoise(7, 4, 100));
  EXPECT_NE(GumbelNoise(7, 3, 100), GumbelNoise(7, 3, 101));
  // Greedy rows are left alone; -inf (a masked token) stays -inf.
  EXPECT_EQ(GumbelKey(1.25f, GumbelRow{}, 5), 1.25f);
  const GumbelRow row{2.0, 7, 3};
  EXPECT_EQ(GumbelKey(-std::numeric_limits<float>::infinity(), row, 5),
            -std::numeric_limits<float>::infinity());
  EXPECT_EQ(GumbelKey(1.25f, row, 5), static_cast<float>(2.5 + GumbelNoise(7, 3, 5)));
}

// 40000 draws (counters 0..39999) from logits {0, 1, 2, -inf, 0.5} at temperature 0.8: each
// token's frequency within 5 standard deviations of its softmax probability, the masked token
// never. The draws are a fixed function of the seed, so this cannot flake.
TEST(GumbelSamplingTest, ArgmaxOfPerturbedLogitsFollowsTheSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -std::numeric_limits<float>::infinity(),
                                     0.5f};
  const double temperature = 0.8;
  constexpr int kDraws = 40000;
  std::vector<int> hits(logits.size(), 0);
  for (int d = 0; d < kDraws; ++d) {
    const GumbelRow row{1.0 / temperature, 12345, static_cast<uint64_t>(d)};
    int best = 0;
    for (int i = 1; i < static_cast<int>(logits.size()); ++i) {
      if (GumbelKey(logits[i], row, i) > GumbelKey(logits[best], row, best)) best = i;
    }
    ++hits[best];
  }
  double total = 0.0;
  for (float x : logits) total += std::exp(x / temperature);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = std::exp(logits[i] / temperature) / total;
    const double sigma = std::sqrt(kDraws * p * (1 - p));
    EXPECT_NEAR(hits[i], kDraws * p, 5 * sigma + 1e-9) << "token " << i;
  }
  EXPECT_EQ(hits[3], 0);
}

// The CPU's Philox over sixteen lanes gives each token the bits GumbelBits gives it: random
// seeds and counters, tokens at 0, near 2^32 (the high counter word) and beyond.
TEST(GumbelSamplingTest, LanesDrawEachTokensBits) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t seed = rng(), counter = trial % 3 ? rng() : static_cast<uint64_t>(trial);
    const int64_t first = trial % 4 == 0   ? 0
                          : trial % 4 == 1 ? (int64_t{1} << 32) - 7
                                           : static_cast<int64_t>(rng() >> 20);
    uint64_t bits[cpu::kGumbelLanes];
    cpu::GumbelBitsOfLanes(seed, counter, first, bits);
    for (int l = 0; l < cpu::kGumbelLanes; ++l) {
      ASSERT_EQ(bits[l], GumbelBits(seed, counter, first + l))
          << "trial " << trial << " lane " << l;
    }
  }
}

// GumbelNoiseBound is an upper bound of the noise, never more than ln 2 above -log(1 - u):
// at the extreme bits, and at a million random ones.
TEST(GumbelSamplingTest, TheNoiseBoundIsAboveTheNoiseAndCloseToMinusLogOneMinusU) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> bits = {
      0, 1, 2, (uint64_t{1} << 51), (uint64_t{1} << 52) - 2, (uint64_t{1} << 52) - 1};
  for (int i = 0; i < 1000000; ++i) bits.push_back(rng() >> 12);
  double worst_gap = 0.0;
  for (uint64_t b : bits) {
    const double noise = GumbelOfBits(b), bound = GumbelNoiseBound(b);
    ASSERT_GE(bound, noise) << "bits " << b;
    const double u = (static_cast<double>(b) + 0.5) * 0x1p-52;
    const double tight = -std::log1p(-u);
    ASSERT_GE(bound, tight - 1e-12) << "bits " << b;
    worst_gap = std::max(worst_gap, bound - tight);
  }
  EXPECT_LT(worst_gap, 0.07);  // (1 - log2 e + log2 log2 e) ln 2 = 0.0597 at most
}

// The scan that skips values which cannot win gives the full scan's winner: rows from flat to
// peaked (logit spreads up to 400 at temperatures 0.3-2), ties, -inf and NaN included, rows of
// one repeated value, rows with a top-k or top-p cut, many draws.
TEST(GumbelSamplingTest, TheSkippingScanGivesTheFullScansWinner) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 600; ++trial) {
    const float spread = trial % 3 == 0 ? 0.05f : 0.5f + static_cast<float>(trial % 10) * 40.0f;
    std::vector<float> row(1 + rng() % 3000);
    for (float& v : row) v = trial % 11 == 0 ? 1.5f : spread * normal(rng);
    row[rng() % row.size()] = row[rng() % row.size()];  // a tie
    row[rng() % row.size()] = -std::numeric_limits<float>::infinity();
    if (trial % 13 == 0) row[rng() % row.size()] = std::numeric_limits<float>::quiet_NaN();
    GumbelRow draw{1.0 / (0.3 + (trial % 7) * 0.3), 11, static_cast<uint64_t>(trial)};
    if (trial % 4 == 1) draw.top_k = 1 + static_cast<int32_t>(rng() % 40);
    if (trial % 4 == 2) draw.top_p = 0.9f;
    SetSamplingCutFromRow(row.data(), static_cast<int64_t>(row.size()), draw);
    ArgmaxCandidate full;
    for (size_t j = 0; j < row.size(); ++j) {
      full = ArgmaxMerge(
          full, {GumbelKey(row[j], draw, 500 + static_cast<int64_t>(j)), static_cast<int32_t>(j)});
    }
    const int64_t n = static_cast<int64_t>(row.size());
    const ArgmaxCandidate scan = cpu::GumbelArgmaxScan(row.data(), 0, n, draw, 500);
    EXPECT_EQ(scan.index, full.index) << "trial " << trial;
    EXPECT_EQ(scan.value, full.value) << "trial " << trial;
  }
}

// TopCandidates is a full sort's first k at every k (a heap for few, a selection for many),
// with ties, NaN and -inf among the values; and a flat row's cut, found by ranking ever more
// candidates, is the cut of the whole row ranked.
TEST(GumbelSamplingTest, TopCandidatesAndTheCutAreTheWholeSortsAtEveryCount) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  std::vector<float> row(5000);
  for (float& v : row) v = std::round(4.0f * normal(rng)) / 4.0f;  // many ties
  row[17] = std::numeric_limits<float>::quiet_NaN();
  row[99] = -std::numeric_limits<float>::infinity();
  const int64_t n = static_cast<int64_t>(row.size());
  std::vector<LogitCandidate> sorted(n);
  for (int64_t j = 0; j < n; ++j) sorted[j] = {row[j], static_cast<int32_t>(j + 7)};
  std::sort(sorted.begin(), sorted.end(), RanksBefore);
  for (int64_t k : {int64_t{1}, int64_t{50}, int64_t{312}, int64_t{313}, int64_t{2000}, n}) {
    const std::vector<LogitCandidate> top = TopCandidates(row.data(), n, k, 7);
    ASSERT_EQ(static_cast<int64_t>(top.size()), k);
    for (int64_t i = 0; i < k; ++i) {
      ASSERT_EQ(top[i].token, sorted[i].token) << "k " << k << " rank " << i;
    }
  }
  for (float top_p : {0.5f, 0.95f, 0.999f}) {
    GumbelRow draw{0.25, 1, 2};  // T 4: flat, the nucleus is far past 625 candidates
    draw.top_p = top_p;
    GumbelRow whole = draw;
    SetSamplingCutFromRow(row.data(), n, draw);
    const std::vector<LogitCandidate> all = TopCandidates(row.data(), n, n);
    FixedMass mass;
    for (int64_t j = 0; j < n; ++j) mass.Add(MassUnits(row[j], all[0].logit, 0.25));
    ASSERT_TRUE(SetSamplingCut(all, mass, /*whole_row=*/true, whole));
    EXPECT_EQ(draw.cut, whole.cut) << "top_p " << top_p;
    EXPECT_EQ(draw.cut_token, whole.cut_token) << "top_p " << top_p;
  }
}

// The cut of a top-k draw (kernels/sampling_cut.h), on logits {2, 1, 1, 0.5, 1, -1} (tokens 0-5;
// in rank order 0, 1, 2, 4, 3, 5): top-k 2 keeps the tokens tied with the second logit (1, 2
// and 4); top-p and min-p cut between tied tokens by id; GumbelKey masks the tokens below.
TEST(GumbelSamplingTest, ACutKeepsTheTokensTopKTopPAndMinPKeep) {
  const std::vector<float> logits = {2.0f, 1.0f, 1.0f, 0.5f, 1.0f, -1.0f};
  const std::vector<LogitCandidate> ranked = TopCandidates(logits.data(), 6, 6);
  ASSERT_EQ(ranked.size(), 6u);
  EXPECT_EQ(ranked[3].token, 4);
  EXPECT_EQ(TopCandidates(logits.data(), 6, 2, 100)[1].token, 101);
  auto kept = [&](int32_t top_k, float top_p, float min_p) {
    GumbelRow draw{1.0, 5, 0};
    draw.top_k = top_k;
    draw.top_p = top_p;
    draw.min_p = min_p;
    SetSamplingCut(ranked, {}, /*whole_row=*/true, draw);
    std::vector<int> out;
    for (int t = 0; t < 6; ++t) {
      if (GumbelKey(logits[t], draw, t) != -INFINITY) out.push_back(t);
    }
    return out;
  };
  EXPECT_EQ(kept(2, 1.0f, 0.0f), (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(kept(1, 1.0f, 0.0f), (std::vector<int>{0}));
  EXPECT_EQ(kept(6, 1.0f, 0.0f), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  // Weights 1, e^-1 (x3), e^-1.5, e^-3: total 2.3765. Top-p 0.5 keeps token 0 (0 < 1.19) and
  // token 1 (1 < 1.19), not token 2 (1.37 >= 1.19).
  EXPECT_EQ(kept(6, 0.5f, 0.0f), (std::vector<int>{0, 1}));
  // Min-p 0.3 keeps weights >= 0.3: e^-1 = 0.37 (tokens 1, 2, 4), not e^-1.5 = 0.22.
  EXPECT_EQ(kept(6, 1.0f, 0.3f), (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(kept(3, 1.0f, 0.3f), (std::vector<int>{0, 1, 2, 4}));
  // A NaN logit ranks last and is never kept.
  const std::vector<float> with_nan = {1.0f, NAN, 0.5f};
  const std::vector<LogitCandidate> nan_ranked = TopCandidates(with_nan.data(), 3, 3);
  EXPECT_EQ(nan_ranked[2].token, 1);
  for (const float top_p : {1.0f, 0.01f}) {
    GumbelRow draw{1.0, 5, 0};
    draw.top_k = 3;
    draw.top_p = top_p;
    SetSamplingCut(nan_ranked, {}, /*whole_row=*/true, draw);
    EXPECT_EQ(GumbelKey(NAN, draw, 1), -INFINITY);
    EXPECT_EQ(GumbelKey(0.5f, draw, 2) != -INFINITY, top_p == 1.0f);
  }
  // A greedy draw, or one without top-k, keeps every token.
  GumbelRow greedy;
  greedy.top_k = 1;
  SetSamplingCut(ranked, {}, true, greedy);
  EXPECT_EQ(greedy.cut, -INFINITY);
  GumbelRow plain{1.0, 5, 0};
  SetSamplingCut(ranked, {}, true, plain);
  EXPECT_EQ(GumbelKey(-1.0f, plain, 5), GumbelKey(-1.0f, GumbelRow{1.0, 5, 0}, 5));
}

}  // namespace
}  // namespace pdspark::kernels
