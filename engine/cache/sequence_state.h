// Per-sequence model state: for every layer the cache groups of its CacheLayout, stored in
// pages of the model's KV pool. Supports truncation to a position (speculation rollback), a byte
// snapshot/restore (KV transfer between prefill and decode processes) and exact memory
// accounting. Freed on destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "engine/cache/cache_layout.h"
#include "engine/cache/kv_pool.h"
#include "engine/cache/paged_rows.h"

namespace pdspark::engine {

class SequenceState {
 public:
  SequenceState(const CacheLayout* layout, KvPool* pool);

  // Tokens whose state is cached (the next token goes to this position).
  int64_t num_tokens() const { return num_tokens_; }
  const CacheLayout& layout() const { return *layout_; }

  PagedRows& Group(int64_t layer, CacheGroupKind kind);
  const PagedRows& Group(int64_t layer, CacheGroupKind kind) const;
  // Group `index` of the layer's groups (CacheLayout order).
  const PagedRows& GroupAt(int64_t layer, int64_t index) const { return groups_[layer][index]; }

  // Pool pages the forward needs to append `count` more tokens (an upper bound: every group's
  // rows rounded up).
  int64_t PagesToGrow(int64_t count) const;

  // Grows every group to the rows of num_tokens() + count tokens, of unspecified values that
  // the forward then writes (each tensor-parallel rank its replica of the pool: kv_pool.h).
  // Called before the ranks run, so the block tables, host state, change on one thread. The
  // pages must be free (PagesToGrow).
  void ReserveTokens(int64_t count);
  // Drops the rows reserved past num_tokens() (after a step that failed).
  void DropReservedRows();
  // Called by the forward once the `count` reserved tokens' rows were written; releases blocks
  // that fell out of every group's retention window.
  void CommitTokens(int64_t count);
  // Rows at or after first_rows[g] (groups layer-major, in layout order) are never released,
  // however far the window moves: a KV transfer ships them from their pages.
  void KeepRowsFrom(std::vector<int64_t> first_rows) { keep_rows_from_ = std::move(first_rows); }

  // A state of the same tokens sharing every page with this one (the prefix cache's entries and
  // the requests that reuse them); whichever side appends first copies the page it writes to.
  // The fork keeps no KeepRowsFrom. With `own_last_pages` (the prefix cache storing a live
  // request's state) the fork copies each group's partly filled last page, so the request never
  // has to copy a page it writes (PagedRows::Fork); ResourceExhausted when the pool is short.
  StatusOr<std::unique_ptr<SequenceState>> Fork(PageHolder holder = PageHolder::kRequest,
                                                bool own_last_pages = false);
  // Releases what a sequence of num_tokens() would no longer hold (CommitTokens of nothing):
  // a fork made from a state that kept rows for a transfer drops them.
  void ReleaseOutOfWindow() { CommitTokens(0); }

  // Whether this state holds every row a state of num_tokens() tokens built from scratch would
  // (with KeepRowsFrom(keep_rows_from), which may be empty): then the forward can continue from
  // it. A fork of a state that kept fewer rows (another window, rows released) cannot.
  bool HoldsRowsOfAFreshState(std::span<const int64_t> keep_rows_from) const;

  // Rolls back to the first `position` tokens. Fails (state unchanged) when the state needed
  // to continue from `position` was already released (beyond max_rollback_tokens).
  Status Truncate(int64_t position);

  // Self-describing snapshot of the whole state; Restore checks it matches this layout.
  std::string Serialize() const;
  Status Restore(std::string_view bytes);

  // The rows one cache group holds: [first_row, size) as stored, not owned; null data: rows
  // left for a KV transfer to write into the pages (KvReceiver prepares a sequence so).
  struct GroupRows {
    int64_t first_row = 0;
    int64_t size = 0;
    const char* data = nullptr;
  };
  // Replaces the state by `num_tokens` tokens whose cache groups hold `groups` (every layer's
  // groups, layer-major in layout order), copying each group's rows once into pool pages.
  // This is how a KV transfer restores straight from the staging memory it arrived in. Fails
  // (state emptied) when the pool has too few free pages.
  Status RestoreRows(int64_t num_tokens, std::span<const GroupRows> groups);

  // Turns this state, a cached prefix of the prompt, into the state of its `num_tokens` tokens
  // that a KV transfer fills in: group i (layer-major, in layout order) ends up holding rows
  // [groups[i].first_row, groups[i].size); rows below ship_from[i] are the ones this state
  // already holds (pages it shares with the prefix cache stay shared), rows from ship_from[i]
  // on get pages of their own, of unspecified values. ship_from[i] lies on a page boundary in
  // [first_row, size], or equals first_row (the group is received whole). Fails (state emptied)
  // when the pool has too few free pages or this state lacks a row it should keep.
  Status ExtendForTransfer(int64_t num_tokens, std::span<const GroupRows> groups,
                           std::span<const int64_t> ship_from);

  // Bytes of pool pages held by this sequence.
  int64_t MemoryBytes() const;
  void Free();

 private:
  explicit SequenceState(const CacheLayout* layout) : layout_(layout) {}
  // Cache groups over all layers.
  size_t NumGroups() const;
  // Every group cut to the rows of the first `position` tokens.
  void TruncateRows(int64_t position);

  const CacheLayout* layout_;
  std::vector<std::vector<PagedRows>> groups_;  // [layer][group]
  std::vector<int64_t> keep_rows_from_;         // empty, or one per group (layer-major)
  int64_t num_tokens_ = 0;
};

}  // namespace pdspark::engine
