// The scheduler's admission on KV pool leases: a request that brings a KV-transfer lease too
// small for its max_tokens grows it when the pool allows, and keeps what it holds meanwhile.
#include "engine/serving/scheduler.h"

#include <deque>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/serving/golden_requests.h"

namespace pdspark::serving {
namespace {

TEST(SchedulerTest, ABroughtLeaseGrowsWhenThePoolAllowsAndIsKeptMeanwhile) {
  auto model = LoadModel(/*block_rows=*/8, 256, /*kv_cache_bytes=*/8 << 20);
  ServingOptions options;
  Scheduler scheduler(options, *model, 256, /*drafting=*/false, 0);

  auto request = std::make_unique<ActiveRequest>();
  request->spec = Spec("r", Prompt(10, 1), 200);
  request->spec.generated = {5};
  request->spec.prefilled = std::make_shared<PrefilledState>();
  request->spec.prefilled->lease = scheduler.ReserveCache(10, 1).value();
  const int64_t brought = request->spec.prefilled->lease.bytes();
  const int64_t need = scheduler.CacheReservation(request->spec);
  ASSERT_GT(need, brought) << "the scenario needs a lease smaller than the request";

  // The rest of the pool is leased away: the brought lease cannot grow.
  std::vector<CacheLease> others;
  for (auto lease = scheduler.ReserveCache(1, 1); lease.ok(); lease = scheduler.ReserveCache(1, 1))
    others.push_back(std::move(lease).value());
  std::deque<std::unique_ptr<ActiveRequest>> waiting;
  std::vector<std::unique_ptr<ActiveRequest>> running;
  waiting.push_back(std::move(request));
  const int64_t leased = scheduler.leased_bytes();
  for (int attempt = 0; attempt < 3; ++attempt) {
    scheduler.Admit(waiting, running);
    EXPECT_EQ(waiting.size(), 1u);
    EXPECT_EQ(scheduler.leased_bytes(), leased) << "attempt " << attempt;
  }
  others.clear();
  scheduler.Admit(waiting, running);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0]->lease.bytes(), need);
  EXPECT_EQ(scheduler.leased_bytes(), need);
}

// A prefill builds the DSpark context ring when the engine speculates, so its lease covers the
// ring (it did not: the ring's pages were taken from the pool unleased).
TEST(SchedulerTest, APrefillLeasesItsDSparkRing) {
  auto model = LoadModel(/*block_rows=*/8, 256, /*kv_cache_bytes=*/8 << 20);
  ServingOptions options;
  const int64_t ring = 12345;
  Scheduler plain(options, *model, 256, /*drafting=*/false, 0);
  Scheduler drafting(options, *model, 256, /*drafting=*/true, ring);
  RequestSpec spec = Spec("p", Prompt(40, 1), 1);
  spec.prefill_only = true;
  EXPECT_EQ(drafting.CacheReservation(spec), plain.CacheReservation(spec) + ring);
}

// A prefill whose rows a KV transfer ships from the pages keeps them past its window
// (RequestSpec::keep_rows_from): its lease covers the wider windows.
TEST(SchedulerTest, RowsKeptForATransferAreLeased) {
  auto model = LoadModel(/*block_rows=*/8, /*max_rollback_tokens=*/8, 8 << 20);
  ServingOptions options;
  options.max_batch_tokens = 8;
  Scheduler scheduler(options, *model, 256, /*drafting=*/false, 0);
  RequestSpec spec = Spec("p", Prompt(200, 1), 1);
  spec.prefill_only = true;
  const int64_t windowed = scheduler.CacheReservation(spec);
  spec.kept_extra_tokens = 64;
  EXPECT_GT(scheduler.CacheReservation(spec), windowed);
}

}  // namespace
}  // namespace pdspark::serving
