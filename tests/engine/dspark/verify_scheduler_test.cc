// The confidence scheduler as pure functions: the paper's Appendix A counterexample (exact output
// distribution, no sampling noise), Algorithm 1's choices on simple cost curves, and the
// pre-draft plan pricing the drafter.
#include "engine/dspark/verify_scheduler.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace pdspark::dspark {
namespace {

// Appendix A: R = 1, gamma = 2, steps per second SPS(1) = 1.0, SPS(2) = 0.5, SPS(3) = 0.45;
// target p = (0.7, 0.3), draft q = (0.5, 0.5); c_1 = 0.8, and c_2 (which embeds d_1) is 0.9
// after d_1 = A and 0 after d_1 = B. Returns the exact distribution of the first emitted token
// when `lengths` picks the verify length from the survivals: rejection sampling accepts d_1
// with min(1, p/q), else resamples from the residual max(p - q, 0).
std::vector<double> AppendixAFirstToken(
    const std::function<int64_t(const std::vector<double>&)>& length_of) {
  const double p[2] = {0.7, 0.3}, q[2] = {0.5, 0.5}, c2[2] = {0.9, 0.0};
  double residual[2], mass = 0;
  for (int v = 0; v < 2; ++v) mass += residual[v] = std::max(p[v] - q[v], 0.0);
  std::vector<double> out(2, 0.0);
  for (int d1 = 0; d1 < 2; ++d1) {
    const int64_t verify = length_of({0.8, 0.8 * c2[d1]});
    if (verify == 0) {  // plain step: the token comes from p
      for (int v = 0; v < 2; ++v) out[v] += q[d1] * p[v];
      continue;
    }
    const double accept = std::min(1.0, p[d1] / q[d1]);
    out[d1] += q[d1] * accept;
    for (int v = 0; v < 2; ++v) out[v] += q[d1] * (1 - accept) * residual[v] / mass;
  }
  return out;
}

double AppendixACost(int64_t /*sequences*/, int64_t rows) {
  const double sps[] = {0, 1.0, 0.5, 0.45};
  return 1.0 / sps[rows];
}

TEST(VerifySchedulerTest, AppendixACounterexampleStaysUnbiased) {
  const StepBase base{.sequences = 1, .rows = 1, .tokens = 1};
  const auto ours = AppendixAFirstToken([&](const std::vector<double>& s) {
    return ChooseVerifyLengths({s}, base, AppendixACost, 0.0)[0];
  });
  EXPECT_NEAR(ours[0], 0.7, 1e-12);
  EXPECT_NEAR(ours[1], 0.3, 1e-12);
  // The same objective searched without the early stop looks at c_2 before deciding on d_1 and
  // biases the output to (0.85, 0.15), as the paper shows: the check above can fail.
  const auto full_search = AppendixAFirstToken([&](const std::vector<double>& s) {
    int64_t best_len = 0;
    double best = 1.0 / AppendixACost(1, 1), tokens = 1;
    for (int64_t l = 1; l <= 2; ++l) {
      tokens += s[l - 1];
      if (tokens / AppendixACost(1, 1 + l) > best)
        best = tokens / AppendixACost(1, 1 + l), best_len = l;
    }
    return best_len;
  });
  EXPECT_NEAR(full_search[0], 0.85, 1e-12);
}

TEST(VerifySchedulerTest, VerifiesWhilePayingInSurvivalOrder) {
  const StepBase base{.sequences = 2, .rows = 2, .tokens = 2};
  const std::vector<std::vector<double>> s = {{0.9, 0.6, 0.2}, {0.8, 0.7, 0.65}};
  // Free rows: everything above the floor, per request prefixes.
  auto flat = [](int64_t, int64_t) { return 1.0; };
  EXPECT_EQ(ChooseVerifyLengths(s, base, flat, 0.5), (std::vector<int64_t>{2, 3}));
  // Each extra row costs 30 % of a plain step, so a slot pays while s > 0.3 x the step's
  // tokens per cost so far: 0.9, 0.8, 0.7 do (2 -> 2.32), 0.65 < 0.3 x 2.32 stops the search.
  auto linear = [](int64_t, int64_t rows) { return 1.0 + 0.3 * (rows - 2); };
  EXPECT_EQ(ChooseVerifyLengths(s, base, linear, 0.0), (std::vector<int64_t>{1, 2}));
  // A row budget caps it.
  StepBase tight = base;
  tight.max_rows = 3;
  EXPECT_EQ(ChooseVerifyLengths(s, tight, flat, 0.0), (std::vector<int64_t>{1, 0}));
}

TEST(VerifySchedulerTest, PlanDraftsPricesTheDrafter) {
  const StepBase base{.sequences = 4, .rows = 4, .tokens = 4};
  const std::vector<std::vector<double>> predicted = {
      {0.9, 0.8, 0.7}, {0.2, 0.05, 0.01}, {0.85, 0.7, 0.6}, {0.3, 0.1, 0.05}};
  const std::vector<int64_t> caps = {3, 3, 3, 3};
  auto target = [](int64_t, int64_t rows) { return 1.0 + 0.1 * (rows - 4); };
  // A free drafter: the good requests draft all slots (the weak ones may ride along).
  DraftPlan free = PlanDrafts(
      predicted, caps, 3, base, target, [](int64_t, int64_t) { return 0.0; }, 0.0);
  EXPECT_EQ(free.gamma, 3);
  ASSERT_GE(free.requests.size(), 2u);
  EXPECT_EQ(free.requests[0], 0u);
  EXPECT_EQ(free.requests[1], 2u);
  EXPECT_GT(free.predicted_speedup, 1.3);  // 8.55 tokens in 1.6 steps vs 4 in 1
  // A drafter that costs 0.2 step per request: only the two good requests pay for it.
  DraftPlan priced = PlanDrafts(
      predicted, caps, 3, base, target, [](int64_t r, int64_t g) { return 0.2 * r * g / 3.0; },
      0.0);
  EXPECT_EQ(priced.requests, (std::vector<size_t>{0, 2}));
  EXPECT_GT(priced.predicted_speedup, 1.0);
  // A drafter dearer than what it can save: no drafting.
  DraftPlan dear = PlanDrafts(
      predicted, caps, 3, base, target, [](int64_t, int64_t) { return 3.0; }, 0.0);
  EXPECT_EQ(dear.gamma, 0);
  EXPECT_TRUE(dear.requests.empty());
  // A request whose drafter ring must first catch up (5 steps' worth) is ranked by its gain net
  // of that cost: the other good request drafts without it.
  DraftPlan catching_up =
      PlanDrafts(predicted, caps, 3, base, target, [](int64_t, int64_t) { return 0.0; }, 0.0, 1.0,
                 {5.0, 0.0, 0.0, 0.0});
  ASSERT_GE(catching_up.gamma, 1);
  EXPECT_EQ(catching_up.requests.front(), 2u);
  EXPECT_EQ(std::count(catching_up.requests.begin(), catching_up.requests.end(), 0u), 0);
  // Caps bound the slots a request can use.
  DraftPlan capped = PlanDrafts(
      predicted, {1, 1, 1, 1}, 3, base, target, [](int64_t, int64_t) { return 0.0; }, 0.0);
  EXPECT_GE(capped.gamma, 1);
}

}  // namespace
}  // namespace pdspark::dspark
