#include "engine/serving/speculation/drafting_guard.h"

#include <gtest/gtest.h>

namespace pdspark::serving {
namespace {

// Steps of 16 sequences: plain ones commit 16 tokens, drafting ones `tokens`, both in 1 s.
void Feed(DraftingGuard& guard, bool drafted, double tokens, int steps, int64_t sequences = 16) {
  for (int i = 0; i < steps; ++i) guard.Observe(sequences, drafted, tokens, 1.0);
}

TEST(DraftingGuardTest, AllowsDraftingUntilDraftingIsMeasured) {
  DraftingGuard guard;
  EXPECT_TRUE(guard.AllowDrafting(16));
  Feed(guard, false, 16, 10);
  EXPECT_TRUE(guard.AllowDrafting(16));  // plain measured, drafting not: let it measure
  Feed(guard, true, 12, DraftingGuard::kMinSamples - 1);
  EXPECT_TRUE(guard.AllowDrafting(16));
}

TEST(DraftingGuardTest, VetoesDraftingThatRealizesLessThanPlain) {
  DraftingGuard guard;
  Feed(guard, false, 16, 10);
  Feed(guard, true, 14, DraftingGuard::kMinSamples);
  EXPECT_FALSE(guard.AllowDrafting(16));
  EXPECT_DOUBLE_EQ(guard.PlainRate(16), 16.0);
  EXPECT_NEAR(guard.DraftingRate(16), 14.0, 1e-9);
}

TEST(DraftingGuardTest, AllowsDraftingAgainWhenProbesRealizeMore) {
  DraftingGuard guard;
  Feed(guard, false, 16, 10);
  Feed(guard, true, 14, 5);
  ASSERT_FALSE(guard.AllowDrafting(16));
  // The workload changed: probes now commit 24 tokens per second; recent steps outweigh old.
  Feed(guard, true, 24, 4);
  EXPECT_TRUE(guard.AllowDrafting(16));
  EXPECT_GT(guard.DraftingRate(16), guard.PlainRate(16));
}

TEST(DraftingGuardTest, MeasuresPlainStepsBeforeDraftingOnAMeasuredDraft) {
  DraftingGuard guard;
  Feed(guard, true, 30, DraftingGuard::kMinSamples);
  EXPECT_FALSE(guard.AllowDrafting(16));  // nothing to compare with: a few plain steps first
  Feed(guard, false, 16, DraftingGuard::kMinSamples);
  EXPECT_TRUE(guard.AllowDrafting(16));
}

TEST(DraftingGuardTest, JudgesEachBatchSizeClassOnItsOwn) {
  DraftingGuard guard;
  Feed(guard, false, 1, 10, 1);  // one sequence: drafting pays
  Feed(guard, true, 2, 5, 1);
  Feed(guard, false, 64, 10, 64);  // 64 sequences: it does not
  Feed(guard, true, 50, 5, 64);
  EXPECT_TRUE(guard.AllowDrafting(1));
  EXPECT_FALSE(guard.AllowDrafting(64));
  EXPECT_FALSE(guard.AllowDrafting(100));  // same class as 64 (64..127)
  EXPECT_TRUE(guard.AllowDrafting(16));    // not measured
}

TEST(DraftingGuardTest, KeepsOneAllowedStepInEveryFewPlainSoThePlainFigureStaysCurrent) {
  DraftingGuard guard;
  Feed(guard, false, 16, 10);
  Feed(guard, true, 24, 5);  // drafting pays
  int plain = 0;
  for (int i = 0; i < 4 * DraftingGuard::kPlainRefreshEvery; ++i) {
    plain += guard.AllowDrafting(16) ? 0 : 1;
  }
  EXPECT_EQ(plain, 4);
  // The refreshed plain figure now beats drafting (the machine changed): drafting stops.
  Feed(guard, false, 40, 10);
  EXPECT_FALSE(guard.AllowDrafting(16));
}

}  // namespace
}  // namespace pdspark::serving
