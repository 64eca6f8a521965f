// The KV cache memory of one model: a single arena of equal-size pages, allocated once through
// the backend and never grown, shared by every cache group of every layer and by the DSpark
// drafter rings. Pages are named by int32 ids, so a sequence's cache group is a block table of
// page ids (engine/cache/paged_rows.h) that a GPU kernel can read as it is.
//
// All pages have one size whatever the group (vLLM's hybrid allocator does the same), so one
// free list serves every group and no group can strand memory another needs: a page holds
// `block_size` rows of the window KV, and a group with wider or narrower rows gets fewer or
// more rows per page (PageGeometry). Running out is not an error here: Allocate says so, and
// the callers check what a step or a restore needs before they start (SequenceState::PagesToGrow).
//
// Pages are reference counted so that sequences and the prefix cache can share them
// (SequenceState::Fork): Share adds a holder, Free drops one, and the page returns to the free
// list with its last holder. Whoever writes into a page must hold it alone (PagedRows copies a
// shared page before appending to it). Pages held only by the prefix cache are reclaimable: when
// the free list runs short, the pool asks its reclaimer (the cache's eviction) for pages.
//
//   KvPool pool(memory, PageGeometry::For(layout, 256).page_bytes, pages);
//   PageGroup& window = pool.ForGroup("window_kv", head_dim * sizeof(float));
//   int32_t page = window.Allocate();  // kNoPage when the pool is full
//   char* row = window.Row(page, 3);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pdspark::engine {

class KvPool;

inline constexpr int32_t kNoPage = -1;

// Who holds a page: a request's state, or the prefix cache (whose pages are reclaimable when
// nothing else holds them).
enum class PageHolder { kRequest, kCache };

// One cache group's view of the pool: its row size, how many rows fit a page, and the pages
// it holds (for the per-group metrics).
class PageGroup {
 public:
  PageGroup(KvPool* pool, std::string name, int64_t row_bytes);

  const std::string& name() const { return name_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t rows_per_page() const { return rows_per_page_; }
  // A free page of the pool (reclaiming if needed), held once; kNoPage when none is left.
  int32_t Allocate(PageHolder holder = PageHolder::kRequest);
  // Drops one holder of `page`; the last one returns it to the pool.
  void Free(int32_t page, PageHolder holder = PageHolder::kRequest);
  // Adds a holder to a page this group allocated.
  void Share(int32_t page, PageHolder holder);
  // Whether more than one holder has the page (a writer must copy it first).
  bool IsShared(int32_t page) const;
  char* Row(int32_t page, int64_t index) const;
  int64_t pages_in_use() const;
  KvPool& pool() const { return *pool_; }

 private:
  friend class KvPool;
  // Counts a page just taken for `holder`, under the pool's lock.
  void Took(PageHolder holder);

  KvPool* pool_;
  const std::string name_;
  const int64_t row_bytes_;
  const int64_t rows_per_page_;
  int64_t pages_in_use_ = 0;  // guarded by the pool's mutex
  int64_t reclaimable_ = 0;   // of pages_in_use_, those only the prefix cache holds
};

class KvPool {
 public:
  // `memory` holds `num_pages` pages of `page_bytes` each and outlives the pool (the backend
  // allocated it; the model frees it after the pool and every sequence are gone).
  KvPool(void* memory, int64_t page_bytes, int64_t num_pages);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // The group named `name` with rows of `row_bytes` bytes (created on first use).
  PageGroup& ForGroup(const std::string& name, int64_t row_bytes);

  // Called, without the pool's lock, when fewer than `pages` pages are free; frees what it can
  // (the prefix cache evicts) and returns. At most one reclaimer; set before the pool is shared
  // between threads, and cleared before it dies.
  using Reclaimer = std::function<void(int64_t pages)>;
  void SetReclaimer(Reclaimer reclaimer) { reclaimer_ = std::move(reclaimer); }
  // Whether `pages` pages are free, after asking the reclaimer for them if they were not.
  bool EnsureFree(int64_t pages);

  // The arena (page p at base() + p * page_bytes()): what a transfer agent registers so that a
  // KV transfer writes rows straight into a sequence's pages.
  char* base() const { return base_; }
  int64_t page_bytes() const { return page_bytes_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t capacity_bytes() const { return num_pages_ * page_bytes_; }
  int64_t free_pages() const;
  int64_t pages_in_use() const;
  int64_t bytes_in_use() const { return pages_in_use() * page_bytes_; }
  // Pages only the prefix cache holds: free for the taking.
  int64_t reclaimable_pages() const;
  // The most pages in use at once since the pool was made.
  int64_t high_water_pages() const;
  // Bytes in use per group name, without the pages only the prefix cache holds.
  std::map<std::string, int64_t> BytesInUseByGroup() const;

 private:
  friend class PageGroup;
  char* PageData(int32_t page) const { return base_ + static_cast<int64_t>(page) * page_bytes_; }
  // Pops a free page (kNoPage when none), under the lock.
  int32_t TakeFreePage(PageHolder holder);
  // Adds `delta` holders of kind `holder` to `page`, under the lock: whether the page became
  // reclaimable (+1) or stopped being so (-1); `freed` when it has no holder left.
  int AddHolders(int32_t page, PageHolder holder, int32_t delta, bool* freed = nullptr);

  char* const base_;
  const int64_t page_bytes_;
  const int64_t num_pages_;
  mutable std::mutex mutex_;
  std::vector<int32_t> free_;     // a stack: recently freed pages are reused first (warm memory)
  std::vector<int32_t> holders_;  // per page: 0 when free
  std::vector<int32_t> cache_holders_;  // per page: how many of its holders are the cache's
  int64_t reclaimable_ = 0;             // pages whose every holder is the cache's
  Reclaimer reclaimer_;
  int64_t high_water_ = 0;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<PageGroup>> groups_;
};

}  // namespace pdspark::engine
