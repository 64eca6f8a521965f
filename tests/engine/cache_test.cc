// The KV pool and the paged rows of one cache group: pages come from one bounded arena, groups
// with other row widths fit other row counts in the same page, running out is reported (never
// a crash), and PagesToGrow predicts exactly what Append takes. Forks share pages by reference
// count and copy a shared page before writing into it; pages only the prefix cache holds are
// counted reclaimable and handed back through the pool's reclaimer.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/cache/kv_pool.h"
#include "engine/cache/paged_rows.h"
#include "gtest/gtest.h"
#include "tests/engine/test_kv_pool.h"

namespace pdspark::engine {
namespace {

// An arena of `pages` pages of 4 rows of 2 floats.
struct SmallPool : TestKvPool {
  explicit SmallPool(int64_t pages) : TestKvPool(32, pages) {}
};

TEST(PagedRows, AppendTruncateRelease) {
  SmallPool arena(8);
  KvPool& pool = arena.pool;
  {
    PagedRows rows(&pool.ForGroup("g", 2 * sizeof(float)));
    EXPECT_EQ(rows.rows_per_page(), 4);
    for (int i = 0; i < 10; ++i) {
      float* r = rows.AppendFloats();
      r[0] = i;
      r[1] = -i;
    }
    EXPECT_EQ(rows.size(), 10);
    EXPECT_EQ(pool.pages_in_use(), 3);  // 4 + 4 + 2 rows
    EXPECT_EQ(rows.block_table().size(), 3u);
    EXPECT_EQ(rows.Floats(9)[1], -9.0f);
    rows.ReleaseBelow(8);  // pages [0,4) and [4,8) go
    EXPECT_EQ(rows.first_row(), 8);
    EXPECT_EQ(pool.pages_in_use(), 1);
    EXPECT_EQ(rows.Floats(8)[0], 8.0f);
    rows.Truncate(9);
    EXPECT_EQ(rows.size(), 9);
    EXPECT_EQ(rows.AppendFloats()[0], 9.0f);  // stale contents are the caller's to overwrite
    EXPECT_EQ(rows.bytes(), 32);
  }
  EXPECT_EQ(pool.pages_in_use(), 0);  // destruction frees everything
  EXPECT_EQ(pool.high_water_pages(), 3);
}

TEST(KvPool, GroupsOfOtherWidthsShareOnePageSize) {
  SmallPool arena(4);
  PagedRows narrow(&arena.pool.ForGroup("narrow", 1 * sizeof(float)));
  PagedRows wide(&arena.pool.ForGroup("wide", 8 * sizeof(float)));
  EXPECT_EQ(narrow.rows_per_page(), 8);
  EXPECT_EQ(wide.rows_per_page(), 1);
  for (int i = 0; i < 9; ++i) narrow.AppendFloats()[0] = static_cast<float>(i);
  for (int i = 0; i < 2; ++i) wide.AppendFloats()[7] = static_cast<float>(100 + i);
  EXPECT_EQ(arena.pool.pages_in_use(), 4);
  const auto bytes = arena.pool.BytesInUseByGroup();
  EXPECT_EQ(bytes.at("narrow"), 2 * 32);
  EXPECT_EQ(bytes.at("wide"), 2 * 32);
  // Rows never overlap across the groups' pages.
  for (int i = 0; i < 9; ++i) EXPECT_EQ(narrow.Floats(i)[0], static_cast<float>(i));
  EXPECT_EQ(wide.Floats(0)[7], 100.0f);
  EXPECT_EQ(wide.Floats(1)[7], 101.0f);
}

TEST(KvPool, PagesToGrowPredictsWhatAppendTakes) {
  SmallPool arena(16);
  PagedRows rows(&arena.pool.ForGroup("g", 2 * sizeof(float)));
  for (int64_t target : {1, 3, 4, 5, 12, 13}) {
    const int64_t predicted = rows.PagesToGrow(target);
    const int64_t before = arena.pool.pages_in_use();
    while (rows.size() < target) rows.AppendFloats();
    EXPECT_EQ(arena.pool.pages_in_use() - before, predicted) << target;
  }
  rows.ReleaseBelow(12);  // the table now starts at page 3
  EXPECT_EQ(rows.first_row(), 12);
  EXPECT_EQ(rows.PagesToGrow(16), 0);
  EXPECT_EQ(rows.PagesToGrow(17), 1);
  rows.Truncate(12);  // empties the table: the next row starts page 3 again
  EXPECT_EQ(rows.PagesToGrow(13), 1);
}

TEST(KvPool, FullPoolIsReportedAndLeavesNothingAllocated) {
  SmallPool arena(2);
  PageGroup& group = arena.pool.ForGroup("g", 2 * sizeof(float));
  const int32_t a = group.Allocate(), b = group.Allocate();
  EXPECT_NE(a, kNoPage);
  EXPECT_NE(b, kNoPage);
  EXPECT_EQ(group.Allocate(), kNoPage);
  group.Free(b);
  // Restoring 8 rows needs 2 pages; 1 is free: refused, and the free page is not leaked.
  std::vector<float> rows(8 * 2, 1.0f);
  PagedRows restored(&group);
  const Status st = restored.Assign(0, 8, reinterpret_cast<const char*>(rows.data()));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("--kv-cache-memory-bytes"), std::string::npos) << st;
  EXPECT_EQ(restored.size(), 0);
  EXPECT_EQ(arena.pool.free_pages(), 1);
  group.Free(a);
  EXPECT_EQ(arena.pool.high_water_pages(), 2);
}

// Replicas of the arena (one per tensor-parallel rank with memory of its own): what the host
// writes through the pool reaches every replica at the same offset, what it reads comes from
// the first, and a transfer landed from the mirror reaches them all.
TEST(KvPool, HostWritesReachEveryReplicaAndReadsComeFromTheFirst) {
  SmallPool arena(4);
  KvPool& pool = arena.pool;
  std::vector<float> second(arena.memory.size(), -1.0f), third(arena.memory.size(), -1.0f);
  pool.AddReplica(second.data(), nullptr);
  pool.AddReplica(third.data(), nullptr);
  ASSERT_EQ(pool.replicas(), 3);
  EXPECT_EQ(pool.replica_offset(0), 0);
  const auto in_replica = [&](int r, const char* at) {
    return reinterpret_cast<const float*>(at + pool.replica_offset(r));
  };
  PagedRows rows(&pool.ForGroup("g", 2 * sizeof(float)));
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(rows.Assign(0, 3, reinterpret_cast<const char*>(values.data())).ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(in_replica(r, rows.Row(2))[1], 6.0f) << "replica " << r;
  }
  pool.ZeroBytes(rows.Row(0), 2 * sizeof(float));
  pool.CopyBytes(rows.Row(1), rows.Row(2), 2 * sizeof(float));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(in_replica(r, rows.Row(0))[0], 0.0f) << "replica " << r;
    EXPECT_EQ(in_replica(r, rows.Row(1))[0], 5.0f) << "replica " << r;
  }
  // Reads come from the first replica alone.
  third[0] = 42.0f;
  float read = -1.0f;
  pool.ReadBytes(&read, reinterpret_cast<const char*>(arena.memory.data()), sizeof(float));
  EXPECT_EQ(read, arena.memory[0]);
  // Replicated host arenas need a mirror for transfers: written there, landed in every replica.
  pool.EnableHostMirror();
  ASSERT_NE(pool.transfer_base(), pool.base());
  const float landed[2] = {7.0f, 8.0f};
  std::memcpy(const_cast<char*>(pool.TransferAddress(rows.Row(2))), landed, sizeof(landed));
  pool.LandTransfer(rows.Row(2), sizeof(landed));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(in_replica(r, rows.Row(2))[0], 7.0f) << "replica " << r;
    EXPECT_EQ(in_replica(r, rows.Row(2))[1], 8.0f) << "replica " << r;
  }
}

// A device arena's mirror is pinned through the device's copies a chunk at a time, as transfers
// first touch the chunk (here the CPU backend's copies stand in for a device's: its pinning has
// nothing to do and succeeds).
TEST(KvPool, PinsTheTransferMirrorAChunkAtATimeAsTransfersTouchIt) {
  constexpr int64_t kMiB = int64_t{1} << 20, kChunk = KvPool::kMirrorPinChunk;
  ASSERT_EQ(kChunk, 64 * kMiB);
  // 130 pages of 1 MiB: chunks of 64, 64 and 2 MiB. Only the pages written become resident.
  std::unique_ptr<char[]> arena(new char[130 * kMiB]);
  backend::CpuBackend device(nullptr, nullptr);
  {
    KvPool pool(arena.get(), kMiB, 130);
    pool.SetMemoryOps(&device.ops());
    pool.EnableHostMirror();
    ASSERT_NE(pool.transfer_base(), pool.base());
    EXPECT_EQ(pool.mirror_pinned_bytes(), 0);

    arena[kMiB + 5] = 'x';
    const char* staged = pool.StageForTransfer(pool.base() + kMiB, 100);
    EXPECT_EQ(staged[5], 'x');
    EXPECT_EQ(pool.mirror_pinned_bytes(), kChunk);
    pool.LandTransfer(pool.base() + 10 * kMiB, kMiB);  // the same chunk: pinned once
    EXPECT_EQ(pool.mirror_pinned_bytes(), kChunk);
    pool.StageForTransfer(pool.base() + kChunk - 10, 20);  // across chunks 0 and 1
    EXPECT_EQ(pool.mirror_pinned_bytes(), 2 * kChunk);
    char* landing = const_cast<char*>(pool.TransferAddress(pool.base() + 129 * kMiB));
    landing[7] = 'y';
    pool.LandTransfer(pool.base() + 129 * kMiB, kMiB);  // the last, partial chunk
    EXPECT_EQ(pool.mirror_pinned_bytes(), 130 * kMiB);
    EXPECT_EQ(arena[129 * kMiB + 7], 'y');
  }  // the pool unpins its chunks before it unmaps the mirror
}

// A host arena's replicas are copied to with plain memcpy: nothing to pin.
TEST(KvPool, HostReplicasPinNothing) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  std::vector<char> first(2 * kMiB), second(2 * kMiB);
  KvPool pool(first.data(), kMiB, 2);
  pool.AddReplica(second.data(), nullptr);
  pool.EnableHostMirror();
  pool.LandTransfer(pool.base(), kMiB);
  EXPECT_EQ(pool.mirror_pinned_bytes(), 0);
}

TEST(PagedRows, SerialiseRoundTripKeepsLogicalIndices) {
  TestKvPool arena(48, 64);  // 4 rows of 3 floats per page
  KvPool& pool = arena.pool;
  PagedRows rows(&pool.ForGroup("g", 3 * sizeof(float)));
  for (int i = 0; i < 11; ++i) rows.AppendFloats()[2] = static_cast<float>(i);
  rows.ReleaseBelow(5);
  std::string bytes;
  rows.AppendTo(bytes);
  PagedRows copy(&pool.ForGroup("g", 3 * sizeof(float)));
  size_t offset = 0;
  ASSERT_TRUE(copy.ReadFrom(bytes, offset).ok());
  EXPECT_EQ(offset, bytes.size());
  EXPECT_EQ(copy.size(), 11);
  EXPECT_EQ(copy.first_row(), rows.first_row());
  for (int i = rows.first_row(); i < 11; ++i) EXPECT_EQ(copy.Floats(i)[2], static_cast<float>(i));
  std::string truncated = bytes.substr(0, bytes.size() - 1);
  offset = 0;
  EXPECT_FALSE(copy.ReadFrom(truncated, offset).ok());
}

void AppendValue(PagedRows& rows, float v) {
  float* r = rows.AppendFloats();
  r[0] = v;
  r[1] = -v;
}

TEST(PagedRows, ForkSharesPagesAndCopiesAPartlyFilledPageBeforeWriting) {
  SmallPool arena(8);
  KvPool& pool = arena.pool;
  PagedRows rows(&pool.ForGroup("g", 2 * sizeof(float)));
  for (int i = 0; i < 6; ++i) AppendValue(rows, i);  // pages: [0,4) full, [4,6) partly
  PagedRows fork = std::move(rows.Fork(PageHolder::kCache)).value();
  EXPECT_EQ(fork.block_table(), rows.block_table());
  EXPECT_EQ(pool.pages_in_use(), 2);
  EXPECT_EQ(pool.reclaimable_pages(), 0);  // the request holds them too
  // Appending to the shared partly filled page copies it first: one more page.
  EXPECT_EQ(rows.PagesToGrow(7), 1);
  AppendValue(rows, 100);
  EXPECT_EQ(pool.pages_in_use(), 3);
  EXPECT_EQ(rows.block_table()[0], fork.block_table()[0]);  // the full page stays shared
  EXPECT_NE(rows.block_table()[1], fork.block_table()[1]);
  EXPECT_EQ(pool.reclaimable_pages(), 1);  // the fork's old partly filled page
  EXPECT_EQ(rows.Floats(5)[0], 5.0f);      // rows copied with the page
  EXPECT_EQ(rows.Floats(6)[0], 100.0f);
  EXPECT_EQ(fork.size(), 6);
  // The fork rolls back one row and writes its own: the request's rows are untouched.
  fork.Truncate(5);
  EXPECT_EQ(fork.PagesToGrow(6), 0);  // that page is the fork's alone now
  AppendValue(fork, 200);
  EXPECT_EQ(fork.Floats(5)[0], 200.0f);
  EXPECT_EQ(rows.Floats(5)[0], 5.0f);
  // A truncation into a shared full page: the next write copies it.
  rows.Truncate(2);
  EXPECT_EQ(rows.PagesToGrow(3), 1);
  AppendValue(rows, 300);
  EXPECT_EQ(fork.Floats(2)[0], 2.0f);
  EXPECT_EQ(rows.Floats(2)[0], 300.0f);
  rows.Clear();
  fork.Clear();
  EXPECT_EQ(pool.pages_in_use(), 0);
  EXPECT_EQ(pool.reclaimable_pages(), 0);
}

// The prefix cache's forks own a copy of the partly filled last page: the request they were
// taken from keeps writing to pages nobody else holds.
TEST(PagedRows, ForkThatOwnsItsLastPageLeavesTheSourceItsOwnPages) {
  SmallPool arena(8);
  KvPool& pool = arena.pool;
  PagedRows rows(&pool.ForGroup("g", 2 * sizeof(float)));
  for (int i = 0; i < 6; ++i) AppendValue(rows, i);
  const std::vector<int32_t> before = rows.block_table();
  PagedRows fork = std::move(rows.Fork(PageHolder::kCache, /*own_last_page=*/true)).value();
  EXPECT_EQ(fork.block_table()[0], before[0]);  // the full page is shared
  EXPECT_NE(fork.block_table()[1], before[1]);  // the partly filled one copied
  EXPECT_EQ(fork.Floats(5)[0], 5.0f);
  EXPECT_EQ(rows.PagesToGrow(7), 0);  // no copy before writing
  AppendValue(rows, 100);
  EXPECT_EQ(rows.block_table(), before);
  EXPECT_EQ(fork.size(), 6);
  EXPECT_EQ(pool.reclaimable_pages(), 1);  // the fork's copy; the full page has two holders
  // No page for the copy: the fork fails and holds nothing.
  PagedRows filler(&pool.ForGroup("g", 2 * sizeof(float)));
  while (pool.free_pages() > 0) AppendValue(filler, 0);
  EXPECT_FALSE(rows.Fork(PageHolder::kCache, /*own_last_page=*/true).ok());
  EXPECT_EQ(pool.reclaimable_pages(), 1);
}

TEST(KvPool, ReclaimerIsAskedForPagesWhenNoneIsFree) {
  SmallPool arena(2);
  KvPool& pool = arena.pool;
  PageGroup& group = pool.ForGroup("g", 2 * sizeof(float));
  auto cached = std::make_unique<PagedRows>(&group);
  cached->HoldFor(PageHolder::kCache);
  for (int i = 0; i < 8; ++i) AppendValue(*cached, i);
  EXPECT_EQ(pool.reclaimable_pages(), 2);
  int64_t asked = 0;
  pool.SetReclaimer([&](int64_t pages) {
    asked = pages;
    cached.reset();
  });
  EXPECT_TRUE(pool.EnsureFree(2));
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(pool.reclaimable_pages(), 0);
  // Allocation asks too, and fails cleanly when nothing can be reclaimed.
  PagedRows live(&group);
  for (int i = 0; i < 8; ++i) AppendValue(live, i);
  asked = 0;
  EXPECT_EQ(group.Allocate(), kNoPage);
  EXPECT_EQ(asked, 1);
  pool.SetReclaimer(nullptr);
}

}  // namespace
}  // namespace pdspark::engine
