#include "router/worker_registry.h"

#include <set>

#include "common/base/prefix_hash.h"
#include "gtest/gtest.h"
#include "router/prefix_index.h"
#include "router/scheduler.h"

namespace pdspark::router {
namespace {

using std::chrono::milliseconds;

v1::RegisterRequest Req(v1::WorkerRole role, const std::string& address,
                        const std::string& incarnation) {
  v1::RegisterRequest r;
  r.set_role(role);
  r.set_address(address);
  r.set_incarnation_id(incarnation);
  r.set_model_id("tiny");
  r.set_max_model_len(2048);
  return r;
}

v1::WorkerLoad Load(uint32_t running, uint32_t queued = 0, uint64_t free_blocks = 100) {
  v1::WorkerLoad l;
  l.set_running_requests(running);
  l.set_queued_requests(queued);
  l.set_free_cache_blocks(free_blocks);
  return l;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  WorkerRegistry registry_{&clock_, milliseconds(100)};
};

TEST_F(WorkerRegistryTest, RegisterGivesIdsAndSnapshot) {
  std::string d = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  std::string p = registry_.Register(Req(v1::WORKER_ROLE_PREFILL, "h:2", "inc-b"));
  EXPECT_NE(d, p);
  auto decoders = registry_.Healthy(v1::WORKER_ROLE_DECODE);
  ASSERT_EQ(decoders.size(), 1u);
  EXPECT_EQ(decoders[0].worker_id, d);
  EXPECT_EQ(decoders[0].address, "h:1");
  EXPECT_EQ(decoders[0].max_model_len, 2048u);
  EXPECT_EQ(registry_.Healthy(v1::WORKER_ROLE_PREFILL).size(), 1u);
}

TEST_F(WorkerRegistryTest, SameIncarnationRegisteringAgainKeepsId) {
  std::string a = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  EXPECT_EQ(registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a")), a);
  EXPECT_EQ(registry_.All().size(), 1u);
}

TEST_F(WorkerRegistryTest, NewIncarnationReplacesOld) {
  std::string old_id = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  std::string new_id = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-b"));
  EXPECT_NE(old_id, new_id);
  ASSERT_EQ(registry_.All().size(), 1u);
  EXPECT_EQ(registry_.All()[0].incarnation_id, "inc-b");
  // The old process's heartbeats are refused, so it would re-register (it is gone anyway).
  EXPECT_FALSE(registry_.Heartbeat(old_id, "inc-a", Load(0)));
  EXPECT_TRUE(registry_.Heartbeat(new_id, "inc-b", Load(0)));
}

TEST_F(WorkerRegistryTest, SilentListsWorkersPastTheSilenceExceptDraining) {
  std::string a = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  std::string b = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:2", "inc-b"));
  clock_.Advance(milliseconds(1000));
  EXPECT_TRUE(registry_.Silent(milliseconds(1000)).empty());
  EXPECT_TRUE(registry_.Heartbeat(b, "inc-b", Load(0)));
  clock_.Advance(milliseconds(1));
  EXPECT_EQ(registry_.Silent(milliseconds(1000)), std::vector<std::string>{a});
  // A draining worker stops heartbeating while it finishes its work: not silent.
  ASSERT_TRUE(registry_.Drain(a));
  EXPECT_TRUE(registry_.Silent(milliseconds(1000)).empty());
}

TEST_F(WorkerRegistryTest, UnknownHeartbeatAnswersUnknown) {
  EXPECT_FALSE(registry_.Heartbeat("decode-42", "whatever", Load(0)));
  std::string id = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  EXPECT_FALSE(registry_.Heartbeat(id, "other-incarnation", Load(0)));
}

TEST_F(WorkerRegistryTest, MissingThreeIntervalsIsUnhealthyAndHeartbeatRevives) {
  std::string id = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  clock_.Advance(milliseconds(300));  // exactly 3 intervals: still healthy
  EXPECT_EQ(registry_.Healthy(v1::WORKER_ROLE_DECODE).size(), 1u);
  clock_.Advance(milliseconds(1));
  EXPECT_TRUE(registry_.Healthy(v1::WORKER_ROLE_DECODE).empty());
  ASSERT_TRUE(registry_.Find(id).has_value());
  EXPECT_EQ(registry_.Find(id)->state, WorkerState::kUnhealthy);
  EXPECT_TRUE(registry_.Heartbeat(id, "inc-a", Load(2)));
  EXPECT_EQ(registry_.Healthy(v1::WORKER_ROLE_DECODE).size(), 1u);
  EXPECT_EQ(registry_.Find(id)->load.running_requests(), 2u);
}

TEST_F(WorkerRegistryTest, DrainStopsNewWork) {
  std::string id = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  EXPECT_TRUE(registry_.Drain(id));
  EXPECT_TRUE(registry_.Healthy(v1::WORKER_ROLE_DECODE).empty());
  EXPECT_EQ(registry_.Find(id)->state, WorkerState::kDraining);
  EXPECT_FALSE(registry_.Drain("nope"));
}

TEST_F(WorkerRegistryTest, AssignedCountResetsOnHeartbeat) {
  std::string id = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "h:1", "inc-a"));
  registry_.NoteAssigned(id);
  registry_.NoteAssigned(id);
  EXPECT_EQ(registry_.Find(id)->assigned_since_heartbeat, 2u);
  registry_.Heartbeat(id, "inc-a", Load(2));
  EXPECT_EQ(registry_.Find(id)->assigned_since_heartbeat, 0u);
}

class SchedulerTest : public WorkerRegistryTest {
 protected:
  std::string AddDecode(const std::string& address) {
    return registry_.Register(Req(v1::WORKER_ROLE_DECODE, address, "inc-" + address));
  }
};

TEST_F(SchedulerTest, ParsesPolicies) {
  EXPECT_EQ(*ParseSchedulingPolicy("round_robin"), SchedulingPolicy::kRoundRobin);
  EXPECT_EQ(*ParseSchedulingPolicy("least_loaded"), SchedulingPolicy::kLeastLoaded);
  EXPECT_FALSE(ParseSchedulingPolicy("random").ok());
}

TEST_F(SchedulerTest, NoDecodeWorkerIsUnavailable) {
  Scheduler s(&registry_, SchedulingPolicy::kRoundRobin, SchedulingPolicy::kRoundRobin);
  auto a = s.Pick();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, RoundRobinCyclesAndSkipsUnhealthy) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1"), c = AddDecode("c:1");
  Scheduler s(&registry_, SchedulingPolicy::kRoundRobin, SchedulingPolicy::kRoundRobin);
  std::vector<std::string> seen;
  for (int i = 0; i < 6; ++i) seen.push_back(s.Pick()->decode.worker_id);
  EXPECT_EQ(seen, (std::vector<std::string>{a, b, c, a, b, c}));
  // b and c keep heartbeating, a goes silent.
  clock_.Advance(milliseconds(250));
  registry_.Heartbeat(b, "inc-b:1", Load(0));
  registry_.Heartbeat(c, "inc-c:1", Load(0));
  clock_.Advance(milliseconds(100));
  for (int i = 0; i < 4; ++i) EXPECT_NE(s.Pick()->decode.worker_id, a);
}

TEST_F(SchedulerTest, LeastLoadedPrefersIdleThenCountsAssignments) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1");
  registry_.Heartbeat(a, "inc-a:1", Load(5));
  registry_.Heartbeat(b, "inc-b:1", Load(1));
  Scheduler s(&registry_, SchedulingPolicy::kLeastLoaded, SchedulingPolicy::kLeastLoaded);
  // b has load 1; after 4 assignments it reaches 5, then the two alternate.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.Pick()->decode.worker_id, b);
  std::set<std::string> next = {s.Pick()->decode.worker_id, s.Pick()->decode.worker_id};
  EXPECT_EQ(next, (std::set<std::string>{a, b}));
}

TEST_F(SchedulerTest, LeastLoadedTieBreaksOnFreeCache) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1");
  registry_.Heartbeat(a, "inc-a:1", Load(2, 0, 10));
  registry_.Heartbeat(b, "inc-b:1", Load(1, 1, 500));
  Scheduler s(&registry_, SchedulingPolicy::kLeastLoaded, SchedulingPolicy::kLeastLoaded);
  EXPECT_EQ(s.Pick()->decode.worker_id, b);
}

TEST_F(SchedulerTest, PicksPrefillWhenPresentAndExcludes) {
  std::string d1 = AddDecode("d:1"), d2 = AddDecode("d:2");
  Scheduler s(&registry_, SchedulingPolicy::kRoundRobin, SchedulingPolicy::kLeastLoaded);
  EXPECT_FALSE(s.Pick()->prefill.has_value());
  std::string p = registry_.Register(Req(v1::WORKER_ROLE_PREFILL, "p:1", "inc-p"));
  auto a = s.Pick();
  ASSERT_TRUE(a->prefill.has_value());
  EXPECT_EQ(a->prefill->worker_id, p);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.PickReplacement(v1::WORKER_ROLE_DECODE, {}, {d1})->worker_id, d2);
  }
  EXPECT_FALSE(s.PickReplacement(v1::WORKER_ROLE_DECODE, {}, {d1, d2}).has_value());
  EXPECT_FALSE(s.PickReplacement(v1::WORKER_ROLE_PREFILL, {}, {p}).has_value());
  EXPECT_EQ(s.PickReplacement(v1::WORKER_ROLE_PREFILL, {}, {d1})->worker_id, p);
}

std::vector<uint32_t> Prompt(uint32_t seed, size_t n) {
  std::vector<uint32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = seed * 1000 + static_cast<uint32_t>(i);
  return p;
}

TEST_F(SchedulerTest, KvAwareSendsSharedPrefixToTheSameWorker) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1");
  Scheduler s(&registry_, SchedulingPolicy::kKvAware, SchedulingPolicy::kKvAware);
  auto idle = [&] {
    registry_.Heartbeat(a, "inc-a:1", Load(0));
    registry_.Heartbeat(b, "inc-b:1", Load(0));
  };
  std::vector<uint32_t> p = Prompt(1, 64);
  const std::string first = s.Pick(p)->decode.worker_id;
  for (int i = 0; i < 5; ++i) {
    idle();
    std::vector<uint32_t> longer = p;
    longer.push_back(7 + i);  // same prefix, different tail
    EXPECT_EQ(s.Pick(longer)->decode.worker_id, first);
  }
  EXPECT_EQ(s.prefix_index().OverlapTokens(first, p), 64u);
  // Unrelated prompts rotate over equally loaded workers.
  std::set<std::string> others;
  for (uint32_t k = 2; k < 6; ++k) {
    idle();
    others.insert(s.Pick(Prompt(k, 64))->decode.worker_id);
  }
  EXPECT_EQ(others, (std::set<std::string>{a, b}));
}

TEST_F(SchedulerTest, KvAwareWeighsLoadAgainstOverlap) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1");
  Scheduler s(&registry_, SchedulingPolicy::kKvAware, SchedulingPolicy::kKvAware);
  std::vector<uint32_t> shortp = Prompt(1, 64), longp = Prompt(2, 1024);
  // Seed a's cache with both prompts (b drained meanwhile).
  registry_.Drain(b);
  ASSERT_EQ(s.Pick(shortp)->decode.worker_id, a);
  ASSERT_EQ(s.Pick(longp)->decode.worker_id, a);
  b = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "b:1", "inc-b:2"));
  registry_.Heartbeat(a, "inc-a:1", Load(2));
  registry_.Heartbeat(b, "inc-b:2", Load(0));
  // 64 cached tokens are not worth two requests of load (2 x 128); 1024 are.
  EXPECT_EQ(s.Pick(shortp)->decode.worker_id, b);
  registry_.Heartbeat(a, "inc-a:1", Load(2));
  registry_.Heartbeat(b, "inc-b:2", Load(0));
  EXPECT_EQ(s.Pick(longp)->decode.worker_id, a);
}

TEST_F(SchedulerTest, KvAwareImbalanceGuardFallsBackToLeastLoaded) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1");
  Scheduler s(&registry_, SchedulingPolicy::kKvAware, SchedulingPolicy::kKvAware);
  std::vector<uint32_t> p = Prompt(1, 4096);
  registry_.Drain(b);
  ASSERT_EQ(s.Pick(p)->decode.worker_id, a);
  b = registry_.Register(Req(v1::WORKER_ROLE_DECODE, "b:1", "inc-b:2"));
  registry_.Heartbeat(a, "inc-a:1", Load(100));
  registry_.Heartbeat(b, "inc-b:2", Load(10));
  EXPECT_EQ(s.Pick(p)->decode.worker_id, b);  // 4096 cached tokens, but a is swamped
}

// A worker's heartbeat says which prefixes its prefix cache holds (the hash of each cached
// token prefix, with its length); kv_aware sends a prompt that starts with one of them there,
// though this router never sent that prefix anywhere.
TEST_F(SchedulerTest, KvAwareScoresThePrefixesWorkersReportCached) {
  std::string a = AddDecode("a:1"), b = AddDecode("b:1");
  Scheduler s(&registry_, SchedulingPolicy::kKvAware, SchedulingPolicy::kKvAware);
  const std::vector<uint32_t> prompt = Prompt(3, 900);
  const std::vector<uint64_t> hashes = PrefixHashes(std::span<const uint32_t>(prompt));
  auto report = [&](uint64_t version, std::vector<uint32_t> lengths) {
    v1::WorkerLoad load = Load(0);
    load.set_cache_version(version);
    for (uint32_t n : lengths) {
      load.add_cached_prefixes(hashes[n]);
      load.add_cached_prefix_lengths(n);
    }
    return load;
  };
  registry_.Heartbeat(a, "inc-a:1", report(7, {}));
  registry_.Heartbeat(b, "inc-b:1", report(3, {100, 800, 850}));
  EXPECT_EQ(registry_.Find(b)->cached_prefixes->prefixes.front().first, 850u);
  EXPECT_EQ(registry_.Find(b)->load.cached_prefixes_size(), 0);  // kept once, not per snapshot
  EXPECT_EQ(s.Pick(prompt)->decode.worker_id, b);
  // Unchanged since the last report: the router keeps what it has.
  v1::WorkerLoad unchanged = Load(0);
  unchanged.set_cache_version(3);
  unchanged.set_cached_prefixes_unchanged(true);
  registry_.Heartbeat(b, "inc-b:1", unchanged);
  registry_.Heartbeat(a, "inc-a:1", report(7, {}));
  EXPECT_EQ(s.Pick(Prompt(3, 860))->decode.worker_id, b);
  // Another prompt with the same first tokens but a different 851st token: only the 800 match.
  std::vector<uint32_t> other = prompt;
  other[820] = 1;
  registry_.Heartbeat(a, "inc-a:1", report(7, {}));
  registry_.Heartbeat(b, "inc-b:1", unchanged);
  EXPECT_EQ(registry_.Find(b)->cached_prefixes->LongestPrefix(
                PrefixHashes(std::span<const uint32_t>(other))),
            800u);
  // b evicted everything and a reports a longer prefix: a wins.
  registry_.Heartbeat(b, "inc-b:1", report(4, {}));
  registry_.Heartbeat(a, "inc-a:1", report(8, {880}));
  EXPECT_EQ(s.Pick(prompt)->decode.worker_id, a);
}

TEST(PrefixIndexTest, CountsLeadingWholeBlocksAndEvicts) {
  PrefixIndex index(/*block_tokens=*/4, /*max_blocks_per_worker=*/3);
  std::vector<uint32_t> p = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(index.OverlapTokens("w", p), 0u);
  index.Record("w", p);
  EXPECT_EQ(index.OverlapTokens("w", p), 8u);  // two whole blocks
  EXPECT_EQ(index.OverlapTokens("w", {1, 2, 3, 4, 0, 0, 0, 0}), 4u);
  EXPECT_EQ(index.OverlapTokens("w", {0, 2, 3, 4, 5, 6, 7, 8}), 0u);  // chained: prefix matters
  EXPECT_EQ(index.OverlapTokens("other", p), 0u);
  index.Record("w", {9, 9, 9, 9, 8, 8, 8, 8});  // 4 blocks > cap 3: the oldest goes
  EXPECT_EQ(index.OverlapTokens("w", p), 0u);
  index.Retain({});
  EXPECT_EQ(index.OverlapTokens("w", {9, 9, 9, 9}), 0u);
}

}  // namespace
}  // namespace pdspark::router
