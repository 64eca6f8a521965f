// The cache budget (--kv-cache-memory-bytes) and the engine's per-step statistics on the golden
// DeepSeek-V4 checkpoint: the worst-case bound really bounds every cache group, a full budget
// makes requests wait (never fail, never overlap past the budget, still end by their deadline),
// and the stats the metrics sampler exports count every step, prefill and cache group.
#include "engine/cache/cache_budget.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "engine/serving/serving_engine.h"
#include "gtest/gtest.h"
#include "tests/engine/serving/golden_requests.h"
#include "tests/engine/serving/request_collector.h"

namespace pdspark::serving {
namespace {

void ExpectWithinBound(const std::map<std::string, int64_t>& used,
                       const std::map<std::string, int64_t>& bound, const std::string& where) {
  for (const auto& [group, bytes] : used) {
    ASSERT_TRUE(bound.contains(group)) << group;
    EXPECT_LE(bytes, bound.at(group)) << group << " " << where;
  }
}

// Small blocks and a short rollback allowance so the window groups release blocks within the
// model's 256 positions: prefill in chunks, decode, and verify-shaped rounds (append 4 rows,
// roll back 3) must all stay within the bound, and the bound must reflect the release.
TEST(CacheBudgetTest, BoundHoldsForEveryGroupThroughChunksDecodeAndRollback) {
  constexpr int64_t kBlockRows = 8, kStep = 24, kTokens = 250;
  auto model = LoadModel(kBlockRows, /*rollback=*/8);
  const engine::PageGeometry pages = model->page_geometry();
  const auto bound = engine::SequenceBytesBound(model->cache_layout(), pages, kTokens, kStep);
  const auto unbounded_windows =
      engine::SequenceBytesBound(model->cache_layout(), pages, kTokens, kTokens);
  EXPECT_LT(bound.at("window_kv"), unbounded_windows.at("window_kv"));
  auto seq = model->NewSequence();
  engine::StepOptions options;
  options.logits = engine::LogitsMode::kNone;
  const auto tokens = Prompt(kTokens, 1);
  int64_t fed = 0;
  for (; fed < 120; fed += kStep) {  // chunked prefill
    engine::StepInput in{seq.get(), std::span<const int32_t>(tokens).subspan(fed, kStep)};
    ASSERT_TRUE(model->Step({&in, 1}, options).ok());
    ExpectWithinBound(model->kv_pool().BytesInUseByGroup(), bound, "prefill");
  }
  while (fed + 4 <= kTokens) {  // verify rounds: 4 rows in, keep 1
    engine::StepInput in{seq.get(), std::span<const int32_t>(tokens).subspan(fed, 4)};
    ASSERT_TRUE(model->Step({&in, 1}, options).ok());
    ExpectWithinBound(model->kv_pool().BytesInUseByGroup(), bound, "verify");
    ASSERT_TRUE(seq->Truncate(++fed).ok());
  }
  EXPECT_GT(seq->Group(0, engine::CacheGroupKind::kWindowKv).first_row(), 0);
}

// Blocks of 8 rows, so a request's reservation grows with its length.
constexpr int64_t kSmallBlocks = 8;

int64_t CacheBytesFor(int64_t tokens) {
  return ServingEngine(LoadModel(kSmallBlocks), {}).CacheBytesFor(tokens, false);
}

TEST(CacheBudgetTest, FullBudgetMakesRequestsWaitNotFail) {
  const int64_t one = CacheBytesFor(20 + 8);
  const int64_t budget = one + one / 2;  // room for one request at a time
  ServingEngine engine(LoadModel(kSmallBlocks, 256, budget), {});
  constexpr int kRequests = 3;
  std::vector<RequestCollector> collectors(kRequests);
  std::mutex mu;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    auto sink = collectors[i].Sink();
    ASSERT_TRUE(engine
                    .Submit(Spec("r" + std::to_string(i), Prompt(20, i), 8),
                            [&, i, sink](const RequestEvent& e) {
                              {
                                std::lock_guard lock(mu);
                                if (spans[i].first == Clock::time_point()) {
                                  spans[i].first = Clock::now();
                                }
                                if (e.outcome != Outcome::kRunning) spans[i].second = Clock::now();
                              }
                              sink(e);
                            })
                    .ok());
    EXPECT_LE(engine.Stats().cache_bytes_reserved, budget);
  }
  for (auto& c : collectors) {
    const RequestEvent e = c.Wait();
    EXPECT_EQ(e.outcome, Outcome::kFinished) << e.error;
    EXPECT_EQ(c.tokens().size(), 8u);
  }
  // First come, first served, one at a time: each starts after the previous one ended.
  for (int i = 1; i < kRequests; ++i) EXPECT_GE(spans[i].first, spans[i - 1].second) << i;
  const ServingStats stats = engine.Stats();
  EXPECT_EQ(stats.cache_bytes_reserved, 0);
  // The pool holds whole pages: the budget rounded down to one.
  const int64_t page = engine.model().page_geometry().page_bytes;
  EXPECT_EQ(stats.cache_capacity_bytes, budget / page * page);
  EXPECT_GE(stats.cache_high_water_bytes, one / 2);
  EXPECT_LE(stats.cache_high_water_bytes, stats.cache_capacity_bytes);
}

TEST(CacheBudgetTest, RequestLargerThanTheBudgetIsRefusedAndWaitingRequestsKeepDeadlines) {
  const int64_t one = CacheBytesFor(10 + 220);
  ServingEngine engine(LoadModel(kSmallBlocks, 256, one), {});
  // The worker refuses to start when a max-length request (256 tokens) could never run.
  const Status startup = engine.CheckCacheBudget();
  EXPECT_EQ(startup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(startup.message().find("--max-model-len 256"), std::string::npos) << startup;
  auto never = [](const RequestEvent&) { ADD_FAILURE() << "sink called"; };
  const Status too_big = engine.Submit(Spec("big", Prompt(200, 1), 50), never);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.message().find("--kv-cache-memory-bytes"), std::string::npos) << too_big;
  // `long` holds the whole budget; `late` waits for it and must fail at its deadline.
  RequestCollector long_c, late_c;
  ASSERT_TRUE(engine.Submit(Spec("long", Prompt(10, 2), 220), long_c.Sink()).ok());
  RequestSpec late = Spec("late", Prompt(10, 3), 5);
  late.deadline = Clock::now() + std::chrono::milliseconds(50);
  ASSERT_TRUE(engine.Submit(late, late_c.Sink()).ok());
  const RequestEvent late_e = late_c.Wait();
  EXPECT_EQ(late_e.outcome, Outcome::kFailed);
  EXPECT_NE(late_e.error.find("deadline"), std::string::npos) << late_e.error;
  EXPECT_TRUE(late_c.tokens().empty());
  EXPECT_TRUE(engine.Cancel("long")) << "`late` must fail while `long` still runs";
  long_c.Wait();
}

TEST(CacheBudgetTest, StatsCountStepsPrefillsAndCacheGroups) {
  ServingEngine engine(LoadModel(256, 256, 64 << 20), {});
  std::vector<RequestCollector> collectors(3);
  int64_t prompt_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    const auto prompt = Prompt(7 + 5 * i, i);
    prompt_tokens += static_cast<int64_t>(prompt.size());
    ASSERT_TRUE(engine.Submit(Spec("s" + std::to_string(i), prompt, 6), collectors[i].Sink()).ok());
  }
  // While requests run, every layout group reports its bytes.
  bool saw_groups = false;
  for (int i = 0; i < 500 && !saw_groups; ++i) {
    const ServingStats s = engine.Stats();
    const auto window = s.cache_bytes_by_group.find("window_kv");
    saw_groups = s.cache_bytes_by_group.size() >= 3 && window != s.cache_bytes_by_group.end() &&
                 window->second > 0;
    if (!saw_groups) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& c : collectors) EXPECT_EQ(c.Wait().outcome, Outcome::kFinished);
  // The step that emitted the last tokens is counted after the sinks ran, before the reap.
  for (int i = 0; i < 500 && engine.Stats().running > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const ServingStats stats = engine.Stats();
  EXPECT_TRUE(saw_groups);
  EXPECT_EQ(stats.step_seconds.count(), stats.steps);
  EXPECT_EQ(stats.batch_size.count(), stats.steps);
  EXPECT_GT(stats.step_seconds.sum, 0.0);
  // 3 requests x 6 tokens; batching means fewer sequences-per-step rows than steps x 3.
  EXPECT_GE(stats.batch_size.sum, 18.0);
  EXPECT_LE(stats.batch_size.sum, 3.0 * static_cast<double>(stats.steps));
  EXPECT_EQ(stats.prefill_seconds.count(), 3);
  EXPECT_EQ(stats.prompt_tokens, prompt_tokens);
  for (const auto& [group, bytes] : stats.cache_bytes_by_group) EXPECT_EQ(bytes, 0) << group;
  EXPECT_EQ(stats.cache_bytes_reserved, 0);
}

// Back-pressure at 4x oversubscription: 64 requests at once on a pool that holds 16 of them.
// Every request completes, the pool never holds more than its size, and the leases never
// exceed it either (so no step ever found the pool full).
TEST(CacheBudgetTest, SixtyFourRequestsOnAPoolForSixteenAllComplete) {
  constexpr int kRequests = 64, kPrompt = 100, kMaxTokens = 6;
  const int64_t one = CacheBytesFor(kPrompt + kMaxTokens);
  ServingOptions options;
  options.max_num_seqs = kRequests;
  ServingEngine engine(LoadModel(kSmallBlocks, 256, 16 * one), options);
  std::vector<RequestCollector> collectors(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(engine
                    .Submit(Spec("r" + std::to_string(i), Prompt(kPrompt, i), kMaxTokens),
                            collectors[i].Sink())
                    .ok());
  }
  int64_t most_reserved = 0;
  for (auto& c : collectors) {
    most_reserved = std::max(most_reserved, engine.Stats().cache_bytes_reserved);
    const RequestEvent e = c.Wait();
    EXPECT_EQ(e.outcome, Outcome::kFinished) << e.error;
    EXPECT_EQ(c.tokens().size(), static_cast<size_t>(kMaxTokens));
  }
  const ServingStats stats = engine.Stats();
  EXPECT_LE(most_reserved, stats.cache_capacity_bytes);
  EXPECT_GT(stats.cache_high_water_bytes, 0);
  EXPECT_LE(stats.cache_high_water_bytes, stats.cache_capacity_bytes);
  EXPECT_LE(stats.cache_capacity_bytes, 16 * one);
  EXPECT_EQ(stats.cache_bytes_reserved, 0);
}

}  // namespace
}  // namespace pdspark::serving
