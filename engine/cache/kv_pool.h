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
// A tensor-parallel model whose ranks have memory of their own (a GPU each) keeps one replica of
// the arena per rank, page for page: the KV rows are replicated state that every rank reads
// (docs/tensor_parallel.md). Pages, rows and block tables are named in the first replica
// (base()); replica_offset(r) moves an address to the same byte of replica r, where rank r
// writes and reads its rows. What the host writes through the pool (CopyBytes, WriteBytes,
// ZeroBytes, LandTransfer) goes to every replica; what it reads comes from the first.
//
//   KvPool pool(memory, PageGeometry::For(layout, 256).page_bytes, pages);
//   PageGroup& window = pool.ForGroup("window_kv", head_dim * sizeof(float));
//   int32_t page = window.Allocate();  // kNoPage when the pool is full
//   char* row = window.Row(page, 3);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/ops.h"

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
  ~KvPool();
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

  // How the host reads and writes the arena: plain copies while it is host memory (the
  // default), the device's copies when it is a GPU's (the model sets its backend's ops). Set
  // before the pool is shared between threads.
  void SetMemoryOps(backend::Ops* ops) { replicas_[0].ops = ops; }
  bool on_host() const { return replicas_[0].ops == nullptr; }
  // Adds a replica of the arena in `memory` (as many bytes as the first; it outlives the pool),
  // reached through `ops` (null: host memory, plain copies). Added before any page is taken,
  // and before the pool is shared between threads.
  void AddReplica(void* memory, backend::Ops* ops);
  int replicas() const { return static_cast<int>(replicas_.size()); }
  // Replica r's address of arena address `at` is at + replica_offset(r) (0 for the first).
  std::ptrdiff_t replica_offset(int replica) const { return replicas_[replica].base - base_; }
  // Bytes within the arena, out of it to the host, into it from the host; zeros (the writes
  // in every replica, the read from the first).
  void CopyBytes(char* dst, const char* src, size_t bytes) const;
  void ReadBytes(void* host, const char* src, size_t bytes) const;
  void WriteBytes(char* dst, const void* host, size_t bytes) const;
  void ZeroBytes(char* dst, size_t bytes) const;

  // A host copy of a device's arena, page for page, for KV transfers (UCX as built here moves
  // host memory only): the prefill side stages the rows it ships there, the decode side has
  // rows written there and lands them in the arena (every replica). A single host arena needs
  // none: transfers use it directly. The model enables it for a device's arena or replicated
  // arenas; its pages become resident only as transfers use them, and the device's copies pin
  // it (Ops::PinHostMemory) a chunk of kMirrorPinChunk bytes at a time, as transfers first
  // touch the chunk. Idempotent.
  void EnableHostMirror();
  static constexpr int64_t kMirrorPinChunk = int64_t{64} << 20;
  // The bytes of the mirror pinned so far.
  int64_t mirror_pinned_bytes() const;
  // Where transfers read and write: the arena itself, or its mirror (page p at
  // transfer_base() + p * page_bytes() either way).
  char* transfer_base() const { return mirror_ ? mirror_.get() : base_; }
  // The transfer address of arena bytes [at, at + bytes), staged there first: what a prefill
  // worker puts from (checksums included).
  const char* StageForTransfer(const char* at, size_t bytes) const;
  // The transfer address of arena address `at`, as it is: what a decode worker checks.
  const char* TransferAddress(const char* at) const;
  // Copies bytes a transfer wrote at `at`'s transfer address into the arena, every replica
  // (nothing to do on a single host arena).
  void LandTransfer(char* at, size_t bytes) const;

  // The arena (page p at base() + p * page_bytes()), in the backend's memory.
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
  // One copy of the arena per rank that has its own memory; the first is base_.
  struct Replica {
    char* base = nullptr;
    backend::Ops* ops = nullptr;  // null: host memory, plain copies
  };
  // fn(ops, address) with arena address `at` in every replica (ops null: host memory).
  template <typename Fn>
  void ForEachReplica(char* at, Fn&& fn) const {
    for (const Replica& r : replicas_) fn(r.ops, at + (r.base - base_));
  }
  std::vector<Replica> replicas_;
  // Pins the mirror's chunks that [at, at + bytes) touches and no earlier call pinned (or
  // tried to).
  void PinMirror(const char* at, size_t bytes) const;
  struct MirrorDeleter {
    size_t bytes;  // no initialiser: a nested class's would keep unique_ptr from defaulting it
    void operator()(char* p) const;
  };
  // EnableHostMirror's (mapped, so page-aligned and resident only where touched), unless the
  // arena is one host arena.
  std::unique_ptr<char, MirrorDeleter> mirror_;
  mutable std::mutex pin_mutex_;
  enum class ChunkPin : uint8_t { kUntried, kPinned, kRefused };
  mutable std::vector<ChunkPin> chunk_pins_;  // per mirror chunk
  int64_t high_water_ = 0;
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<PageGroup>> groups_;
};

}  // namespace pdspark::engine
