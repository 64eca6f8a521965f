#include "engine/sampling/speculative_acceptance.h"

#include <cmath>
#include <random>

#include "engine/sampling/logits_processor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gumbel_scan.h"

namespace pdspark::sampling {
namespace {

using ::testing::ElementsAre;

constexpr int64_t kVocab = 8;
constexpr int kTrials = 200000;
// Chi-square critical values at alpha = 1e-6 (Wilson-Hilferty) for 7 and 63 degrees of freedom.
constexpr double kChiSquare7 = 42.0;
constexpr double kChiSquare63 = 132.0;

using Row = std::vector<float>;

// A random distribution over kVocab with about a quarter of the entries exactly 0, like a
// top-k / top-p masked row.
Row RandomDistribution(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> weight(0.0f, 1.0f);
  Row row(kVocab);
  double sum = 0.0;
  for (float& w : row) {
    w = weight(rng) < 0.25f ? 0.0f : weight(rng);
    sum += w;
  }
  if (sum == 0.0) {
    row[0] = 1.0f;
    sum = 1.0;
  }
  for (float& w : row) w = static_cast<float>(w / sum);
  return row;
}

Row Concat(const std::vector<const Row*>& rows) {
  Row flat;
  for (const Row* row : rows) flat.insert(flat.end(), row->begin(), row->end());
  return flat;
}

Sampler MakeSampler(uint64_t seed, float temperature = 1.0f) {
  SamplingParams params;
  params.seed = seed;
  params.temperature = temperature;
  return *Sampler::Create(params);
}

// Frequencies of `counts` must match `expected` within 0.01 per cell and pass a chi-square
// test; cells with zero probability must never occur.
void ExpectMatches(const std::vector<int64_t>& counts, const std::vector<double>& expected,
                   int64_t total, double chi_square_limit) {
  double chi_square = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double observed = static_cast<double>(counts[i]) / total;
    EXPECT_NEAR(observed, expected[i], 0.01) << "cell " << i;
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "cell " << i;
    } else {
      const double e = expected[i] * total;
      chi_square += (counts[i] - e) * (counts[i] - e) / e;
    }
  }
  EXPECT_LT(chi_square, chi_square_limit);
}

std::vector<double> ToDouble(const Row& row) { return {row.begin(), row.end()}; }

TEST(RejectionSamplingTest, OnePositionPreservesTargetDistribution) {
  std::mt19937_64 rng(2024);
  const Row p0 = RandomDistribution(rng);
  const Row p1 = RandomDistribution(rng);
  const Row q1 = RandomDistribution(rng);
  const Row target = Concat({&p0, &p1});
  Sampler drafter = MakeSampler(1);
  Sampler verifier = MakeSampler(2);
  std::vector<int64_t> counts(kVocab);
  for (int t = 0; t < kTrials; ++t) {
    const int32_t draft = drafter.Sample(q1);
    auto result = AcceptRejectionSampling({.draft_tokens = std::span(&draft, 1),
                                           .draft_probs = q1,
                                           .target_probs = target,
                                           .vocab_size = kVocab},
                                          verifier);
    ASSERT_TRUE(result.ok()) << result.status();
    ++counts[result->tokens[0]];
  }
  ExpectMatches(counts, ToDouble(p0), kTrials, kChiSquare7);
}

TEST(RejectionSamplingTest, DeterministicDraftPreservesTargetDistribution) {
  std::mt19937_64 rng(99);
  const Row p0 = RandomDistribution(rng);
  const Row p1 = RandomDistribution(rng);
  const Row target = Concat({&p0, &p1});
  Sampler verifier = MakeSampler(3);
  for (int32_t draft : {0, 3, 7}) {
    std::vector<int64_t> counts(kVocab);
    for (int t = 0; t < kTrials / 4; ++t) {
      auto result = AcceptRejectionSampling(
          {.draft_tokens = std::span(&draft, 1), .target_probs = target, .vocab_size = kVocab},
          verifier);
      ASSERT_TRUE(result.ok()) << result.status();
      ++counts[result->tokens[0]];
    }
    ExpectMatches(counts, ToDouble(p0), kTrials / 4, kChiSquare7);
  }
}

// A Markov "target model" P[prev] and "drafter" Q[prev] over kVocab tokens. Speculative rounds
// of gamma = 3 drafts generate 4 tokens after x0; every position's marginal and the joint of
// the first two must equal plain autoregressive sampling from P.
class MarkovChainTest : public ::testing::Test {
 protected:
  static constexpr int kLength = 4;
  static constexpr int kGamma = 3;

  void SetUp() override {
    std::mt19937_64 rng(31337);
    for (int i = 0; i < kVocab; ++i) target_.push_back(RandomDistribution(rng));
    for (int i = 0; i < kVocab; ++i) draft_.push_back(RandomDistribution(rng));
  }

  // Generates kLength tokens after `x0` with speculative rounds; `deterministic_draft` uses
  // argmax Q instead of sampling it.
  std::vector<int32_t> Generate(int32_t x0, bool deterministic_draft, Sampler& drafter,
                                Sampler& verifier) {
    std::vector<int32_t> out;
    int32_t prev = x0;
    while (out.size() < kLength) {
      std::vector<int32_t> drafts;
      std::vector<const Row*> q_rows, p_rows = {&target_[prev]};
      for (int k = 0; k < kGamma; ++k) {
        const Row& q = draft_[drafts.empty() ? prev : drafts.back()];
        drafts.push_back(deterministic_draft ? Argmax(q) : drafter.Sample(q));
        q_rows.push_back(&q);
        p_rows.push_back(&target_[drafts.back()]);
      }
      const Row q_flat = deterministic_draft ? Row{} : Concat(q_rows);
      const Row p_flat = Concat(p_rows);
      auto result = AcceptRejectionSampling({.draft_tokens = drafts,
                                             .draft_probs = q_flat,
                                             .target_probs = p_flat,
                                             .vocab_size = kVocab},
                                            verifier);
      EXPECT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->tokens.size(), result->num_accepted + 1u);
      out.insert(out.end(), result->tokens.begin(), result->tokens.end());
      prev = out.back();
    }
    out.resize(kLength);
    return out;
  }

  void RunAndCompare(bool deterministic_draft) {
    constexpr int32_t kX0 = 5;
    Sampler drafter = MakeSampler(11);
    Sampler verifier = MakeSampler(12);
    std::vector<std::vector<int64_t>> marginal(kLength, std::vector<int64_t>(kVocab));
    std::vector<int64_t> joint(kVocab * kVocab);
    for (int t = 0; t < kTrials; ++t) {
      const std::vector<int32_t> tokens = Generate(kX0, deterministic_draft, drafter, verifier);
      for (int j = 0; j < kLength; ++j) ++marginal[j][tokens[j]];
      ++joint[tokens[0] * kVocab + tokens[1]];
    }
    // Exact marginals: e_{x0} P^j.
    std::vector<double> dist(kVocab, 0.0);
    dist[kX0] = 1.0;
    for (int j = 0; j < kLength; ++j) {
      std::vector<double> next(kVocab, 0.0);
      for (int a = 0; a < kVocab; ++a) {
        for (int b = 0; b < kVocab; ++b) next[b] += dist[a] * target_[a][b];
      }
      dist = next;
      SCOPED_TRACE(::testing::Message() << "position " << j);
      ExpectMatches(marginal[j], dist, kTrials, kChiSquare7);
    }
    std::vector<double> exact_joint(kVocab * kVocab);
    for (int a = 0; a < kVocab; ++a) {
      for (int b = 0; b < kVocab; ++b) {
        exact_joint[a * kVocab + b] = target_[kX0][a] * target_[a][b];
      }
    }
    SCOPED_TRACE("joint of the first two tokens");
    ExpectMatches(joint, exact_joint, kTrials, kChiSquare63);
  }

  std::vector<Row> target_;
  std::vector<Row> draft_;
};

TEST_F(MarkovChainTest, SampledDraftsPreserveTargetDistribution) { RunAndCompare(false); }

TEST_F(MarkovChainTest, DeterministicDraftsPreserveTargetDistribution) { RunAndCompare(true); }

TEST(RejectionSamplingTest, ZeroTargetProbabilityAlwaysRejectsIntoResidual) {
  const Row q = {1.0f, 0.0f, 0.0f, 0.0f};
  const Row target = {0.0f, 0.0f, 0.5f, 0.5f, /*bonus row*/ 1.0f, 0.0f, 0.0f, 0.0f};
  Sampler verifier = MakeSampler(4);
  const int32_t draft = 0;
  for (int t = 0; t < 100; ++t) {
    auto result = AcceptRejectionSampling({.draft_tokens = std::span(&draft, 1),
                                           .draft_probs = q,
                                           .target_probs = target,
                                           .vocab_size = 4},
                                          verifier);
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->num_accepted, 0);
    ASSERT_EQ(result->tokens.size(), 1u);
    EXPECT_TRUE(result->tokens[0] == 2 || result->tokens[0] == 3);
  }
}

TEST(RejectionSamplingTest, IdenticalDistributionsAlwaysAcceptAndEmitBonus) {
  const Row p = {0.25f, 0.25f, 0.25f, 0.25f};
  const Row q = Concat({&p, &p});
  const Row target = Concat({&p, &p, &p});
  const Row bonus_only = {0.0f, 0.0f, 0.0f, 1.0f};
  const Row target_with_bonus = Concat({&p, &p, &bonus_only});
  Sampler verifier = MakeSampler(5);
  const std::vector<int32_t> drafts = {1, 2};
  for (int t = 0; t < 100; ++t) {
    auto result = AcceptRejectionSampling({.draft_tokens = drafts,
                                           .draft_probs = q,
                                           .target_probs = target_with_bonus,
                                           .vocab_size = 4},
                                          verifier);
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->num_accepted, 2);
    EXPECT_THAT(result->tokens, ElementsAre(1, 2, 3));
  }
}

TEST(RejectionSamplingTest, NoDraftsSamplesFromFirstRow) {
  const Row target = {0.0f, 1.0f, 0.0f};
  Sampler verifier = MakeSampler(6);
  auto result = AcceptRejectionSampling({.target_probs = target, .vocab_size = 3}, verifier);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->num_accepted, 0);
  EXPECT_THAT(result->tokens, ElementsAre(1));
}

TEST(RejectionSamplingTest, SameSeedGivesSameRounds) {
  std::mt19937_64 rng(8);
  std::vector<Row> rows;
  for (int i = 0; i < 7; ++i) rows.push_back(RandomDistribution(rng));
  const Row q = Concat({&rows[0], &rows[1], &rows[2]});
  const Row target = Concat({&rows[3], &rows[4], &rows[5], &rows[6]});
  const std::vector<int32_t> drafts = {Argmax(rows[0]), Argmax(rows[1]), Argmax(rows[2])};
  Sampler a = MakeSampler(77);
  Sampler b = MakeSampler(77);
  for (int t = 0; t < 200; ++t) {
    const DraftVerification input = {
        .draft_tokens = drafts, .draft_probs = q, .target_probs = target, .vocab_size = kVocab};
    auto ra = AcceptRejectionSampling(input, a);
    auto rb = AcceptRejectionSampling(input, b);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->num_accepted, rb->num_accepted);
    EXPECT_EQ(ra->tokens, rb->tokens);
  }
}

// Target rows for greedy tests: row j is one-hot-ish with its max at argmaxes[j].
Row GreedyRows(const std::vector<int32_t>& argmaxes, int64_t vocab) {
  Row rows;
  for (int32_t top : argmaxes) {
    for (int64_t i = 0; i < vocab; ++i) rows.push_back(i == top ? 0.7f : 0.1f);
  }
  return rows;
}

TEST(GreedyAcceptanceTest, AllAcceptedEmitsBonus) {
  const std::vector<int32_t> drafts = {2, 1};
  const Row target = GreedyRows({2, 1, 3}, 4);
  auto result = AcceptGreedy({.draft_tokens = drafts, .target_probs = target, .vocab_size = 4});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->num_accepted, 2);
  EXPECT_THAT(result->tokens, ElementsAre(2, 1, 3));
}

TEST(GreedyAcceptanceTest, FirstMismatchEmitsCorrection) {
  const Row target = GreedyRows({2, 1, 0, 3}, 4);
  {
    const std::vector<int32_t> drafts = {0, 1, 0};
    auto result = AcceptGreedy({.draft_tokens = drafts, .target_probs = target, .vocab_size = 4});
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->num_accepted, 0);
    EXPECT_THAT(result->tokens, ElementsAre(2));
  }
  {
    // The third draft would match, but nothing after the first mismatch counts.
    const std::vector<int32_t> drafts = {2, 3, 0};
    auto result = AcceptGreedy({.draft_tokens = drafts, .target_probs = target, .vocab_size = 4});
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->num_accepted, 1);
    EXPECT_THAT(result->tokens, ElementsAre(2, 1));
  }
}

TEST(GreedyAcceptanceTest, TiesResolveToLowestId) {
  const Row target = {0.4f, 0.4f, 0.2f, /*bonus*/ 0.1f, 0.45f, 0.45f};
  const int32_t draft = 1;  // Ties with id 0, but argmax is 0: rejected.
  auto result =
      AcceptGreedy({.draft_tokens = std::span(&draft, 1), .target_probs = target, .vocab_size = 3});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->num_accepted, 0);
  EXPECT_THAT(result->tokens, ElementsAre(0));
}

TEST(GreedyAcceptanceTest, NoDraftsIsArgmax) {
  const Row target = {0.1f, 0.2f, 0.7f};
  auto result = AcceptGreedy({.target_probs = target, .vocab_size = 3});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->num_accepted, 0);
  EXPECT_THAT(result->tokens, ElementsAre(2));
}

// Coupled acceptance of one draft: the drafter draws d from q and the target t from p by
// Gumbel-max with the same noise (the same seed and position); d is accepted when d == t, and t
// is emitted either way. Over many positions, for random p and q: the emitted tokens follow p
// (chi-square), and the acceptance rate lies between the bound (1 - TV) / (1 + TV) and rejection
// sampling's 1 - TV (no coupling does better).
TEST(CoupledAcceptanceTest, EmitsTheTargetsDrawAndAcceptsWithinTheCouplingBounds) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 4; ++trial) {
    const Row p = RandomDistribution(rng), q = RandomDistribution(rng);
    Row log_p(kVocab), log_q(kVocab);
    double tv = 0.0;
    for (int64_t i = 0; i < kVocab; ++i) {
      log_p[i] = std::log(p[i]);  // -inf where a mask removed the token
      log_q[i] = std::log(q[i]);
      tv += 0.5 * std::abs(static_cast<double>(p[i]) - q[i]);
    }
    if (tv > 0.95) continue;  // a drafter that can never be right says nothing
    std::vector<int> emitted(kVocab, 0);
    int accepted = 0;
    const int n = kTrials / 4;
    for (int t = 0; t < n; ++t) {
      const kernels::GumbelRow draw{1.0, 99 + static_cast<uint64_t>(trial),
                                    static_cast<uint64_t>(t)};
      const int32_t d = kernels::cpu::GumbelArgmaxOfRow(log_q.data(), kVocab, draw);
      const int32_t target = kernels::cpu::GumbelArgmaxOfRow(log_p.data(), kVocab, draw);
      const AcceptanceResult result = AcceptCoupled(std::span(&d, 1), std::span(&target, 1));
      ASSERT_EQ(result.tokens.front(), target);
      ASSERT_EQ(result.num_accepted, d == target ? 1 : 0);
      accepted += result.num_accepted;
      ++emitted[target];
    }
    double chi2 = 0.0;
    for (int64_t i = 0; i < kVocab; ++i) {
      const double expected = n * static_cast<double>(p[i]);
      if (expected == 0.0) {
        EXPECT_EQ(emitted[i], 0) << "trial " << trial << " token " << i;
        continue;
      }
      chi2 += (emitted[i] - expected) * (emitted[i] - expected) / expected;
    }
    EXPECT_LT(chi2, kChiSquare7) << "trial " << trial;
    const double rate = static_cast<double>(accepted) / n;
    const double slack = 5.0 * std::sqrt(0.25 / n);
    EXPECT_GE(rate, (1.0 - tv) / (1.0 + tv) - slack) << "trial " << trial << " tv " << tv;
    EXPECT_LE(rate, 1.0 - tv + slack) << "trial " << trial << " tv " << tv;
  }
}

TEST(ValidateDraftVerificationTest, RejectsBadShapes) {
  const Row target(3 * 4, 0.25f);
  const std::vector<int32_t> drafts = {1, 2};
  EXPECT_TRUE(
      ValidateDraftVerification({.draft_tokens = drafts, .target_probs = target, .vocab_size = 4})
          .ok());
  EXPECT_EQ(
      ValidateDraftVerification({.draft_tokens = drafts, .target_probs = target, .vocab_size = 0})
          .code(),
      absl::StatusCode::kInvalidArgument);
  const Row short_target(2 * 4, 0.25f);
  EXPECT_THAT(ValidateDraftVerification(
                  {.draft_tokens = drafts, .target_probs = short_target, .vocab_size = 4})
                  .message(),
              ::testing::HasSubstr("target_probs"));
  const Row bad_q(3 * 4, 0.25f);
  EXPECT_THAT(
      ValidateDraftVerification(
          {.draft_tokens = drafts, .draft_probs = bad_q, .target_probs = target, .vocab_size = 4})
          .message(),
      ::testing::HasSubstr("draft_probs"));
  const std::vector<int32_t> out_of_range = {1, 4};
  EXPECT_THAT(ValidateDraftVerification(
                  {.draft_tokens = out_of_range, .target_probs = target, .vocab_size = 4})
                  .message(),
              ::testing::HasSubstr("draft_tokens"));
  Sampler sampler = MakeSampler(1);
  EXPECT_FALSE(AcceptRejectionSampling(
                   {.draft_tokens = out_of_range, .target_probs = target, .vocab_size = 4}, sampler)
                   .ok());
}

}  // namespace
}  // namespace pdspark::sampling
