// The CUDA backend's graph policy (engine/backend/cuda/graph_planner.h), on the host: which runs
// of recorded launches are captured, replayed or run as recorded.
#include "engine/backend/cuda/graph_planner.h"

#include <vector>

#include "gtest/gtest.h"

namespace pdspark::engine::backend {
namespace {

using Action = GraphPlanner::Action;

// A step of `layers` layers: each has four launches that repeat from step to step and, between
// them, one whose parameters change every step (attention over a growing context).
std::vector<uint64_t> Step(int step, int layers) {
  std::vector<uint64_t> launches;
  for (int l = 0; l < layers; ++l) {
    for (int k = 0; k < 4; ++k) launches.push_back(1000 * l + k);
    launches.push_back(1'000'000 + 1000 * step + l);  // new every step
  }
  return launches;
}

std::vector<Action> Actions(const std::vector<GraphPlanner::Piece>& pieces) {
  std::vector<Action> actions;
  for (const auto& p : pieces) actions.push_back(p.action);
  return actions;
}

// The pieces cover the launches in order, with nothing left out and nothing twice.
void ExpectCovers(const std::vector<GraphPlanner::Piece>& pieces, size_t n) {
  size_t at = 0;
  for (const auto& p : pieces) {
    EXPECT_EQ(p.begin, at);
    EXPECT_LT(p.begin, p.end);
    at = p.end;
  }
  EXPECT_EQ(at, n);
}

TEST(GraphPlannerTest, RepeatedRunsAreCapturedOnTheirSecondSightAndReplayedAfter) {
  GraphPlanner planner;
  // Step 0: nothing seen before; step 1: the layers' runs are seen for the first time.
  for (int step = 0; step < 2; ++step) {
    const auto launches = Step(step, 3);
    const auto pieces = planner.Plan(launches);
    ExpectCovers(pieces, launches.size());
    EXPECT_EQ(Actions(pieces), std::vector<Action>{Action::kRun}) << step;
  }
  // Step 2: each layer's four launches are captured; the changing launch between runs as is.
  auto launches = Step(2, 3);
  auto pieces = planner.Plan(launches);
  ExpectCovers(pieces, launches.size());
  const std::vector<Action> captured = {Action::kCapture, Action::kRun,     Action::kCapture,
                                        Action::kRun,     Action::kCapture, Action::kRun};
  ASSERT_EQ(Actions(pieces), captured);
  for (const auto& p : pieces) {
    if (p.action == Action::kCapture) {
      EXPECT_EQ(p.end - p.begin, 4u);
      planner.Captured(p.key);
    }
  }
  EXPECT_EQ(planner.graphs(), 3u);
  // Step 3 on: replayed, under the keys they were captured with.
  for (int step = 3; step < 6; ++step) {
    launches = Step(step, 3);
    const auto replayed = planner.Plan(launches);
    ExpectCovers(replayed, launches.size());
    ASSERT_EQ(replayed.size(), pieces.size());
    for (size_t i = 0; i < replayed.size(); ++i) {
      const bool graph = pieces[i].action == Action::kCapture;
      EXPECT_EQ(replayed[i].action, graph ? Action::kReplay : Action::kRun) << step << " " << i;
      if (graph) EXPECT_EQ(replayed[i].key, pieces[i].key);
    }
  }
  EXPECT_EQ(planner.graphs(), 3u);
}

TEST(GraphPlannerTest, ALaunchWithOtherParametersIsAnotherPiece) {
  GraphPlanner planner;
  std::vector<uint64_t> launches = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 2; ++i) planner.Plan(launches);
  auto pieces = planner.Plan(launches);
  ASSERT_EQ(Actions(pieces), std::vector<Action>{Action::kCapture});
  planner.Captured(pieces[0].key);
  // One launch's parameters differ (another buffer, another grid): not the captured graph.
  launches[3] = 40;
  pieces = planner.Plan(launches);
  ExpectCovers(pieces, launches.size());
  for (const auto& p : pieces) EXPECT_NE(p.action, Action::kReplay);
  // The same launches again: replayed.
  launches[3] = 4;
  pieces = planner.Plan(launches);
  EXPECT_EQ(Actions(pieces), std::vector<Action>{Action::kReplay});
}

TEST(GraphPlannerTest, ShortRunsAndFailedCapturesRunAsRecorded) {
  GraphPlanner planner({.min_launches = 4});
  const std::vector<uint64_t> short_run = {7, 8, 9};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Actions(planner.Plan(short_run)), std::vector<Action>{Action::kRun});
  }
  const std::vector<uint64_t> launches = {1, 2, 3, 4};
  for (int i = 0; i < 2; ++i) planner.Plan(launches);
  auto pieces = planner.Plan(launches);
  ASSERT_EQ(Actions(pieces), std::vector<Action>{Action::kCapture});
  planner.CaptureFailed(pieces[0].key);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Actions(planner.Plan(launches)), std::vector<Action>{Action::kRun});
  }
  EXPECT_EQ(planner.graphs(), 0u);
  EXPECT_EQ(planner.captures_failed(), 1);
}

TEST(GraphPlannerTest, NothingIsCapturedPastTheGraphLimit) {
  GraphPlanner planner({.min_launches = 1, .max_graphs = 2});
  for (uint64_t g = 0; g < 4; ++g) {
    const std::vector<uint64_t> launches = {g * 10 + 1, g * 10 + 2};
    for (int i = 0; i < 2; ++i) planner.Plan(launches);
    const auto pieces = planner.Plan(launches);
    ASSERT_EQ(pieces.size(), 1u);
    if (g < 2) {
      ASSERT_EQ(pieces[0].action, Action::kCapture);
      planner.Captured(pieces[0].key);
    } else {
      EXPECT_EQ(pieces[0].action, Action::kRun);
    }
  }
  EXPECT_EQ(planner.graphs(), 2u);
}

// The same run twice in one flush (a step repeating launches on the same buffers) is captured
// once: the second runs as recorded until the graph exists, then both replay it.
TEST(GraphPlannerTest, ARunTwiceInOneFlushIsCapturedOnce) {
  GraphPlanner planner;
  // The launch between the two runs changes every flush.
  auto flush = [](uint64_t n) { return std::vector<uint64_t>{1, 2, 3, 4, 100 + n, 1, 2, 3, 4}; };
  planner.Plan(flush(0));
  auto pieces = planner.Plan(flush(1));
  // Second sight of the run within this flush already: its second copy is captured.
  ASSERT_EQ(Actions(pieces), (std::vector<Action>{Action::kRun, Action::kCapture}));
  planner.Captured(pieces[1].key);
  pieces = planner.Plan(flush(2));
  EXPECT_EQ(Actions(pieces), (std::vector<Action>{Action::kReplay, Action::kRun, Action::kReplay}));
  // Both copies due for capture in one flush (the graph was not made at the last): one capture.
  GraphPlanner fresh;
  fresh.Plan(flush(0));
  fresh.Plan(flush(1));
  pieces = fresh.Plan(flush(2));
  int captures = 0;
  for (const auto& p : pieces) captures += p.action == Action::kCapture;
  EXPECT_EQ(captures, 1);
}

TEST(GraphPlannerTest, SignaturesTellParametersApart) {
  auto of = [](int64_t a, const void* p, float f) {
    LaunchSignature s;
    s.Add(a);
    s.Add(p);
    s.Add(f);
    return s.value();
  };
  int x = 0, y = 0;
  EXPECT_EQ(of(1, &x, 0.5f), of(1, &x, 0.5f));
  EXPECT_NE(of(1, &x, 0.5f), of(2, &x, 0.5f));
  EXPECT_NE(of(1, &x, 0.5f), of(1, &y, 0.5f));
  EXPECT_NE(of(1, &x, 0.5f), of(1, &x, 0.25f));
}

}  // namespace
}  // namespace pdspark::engine::backend
