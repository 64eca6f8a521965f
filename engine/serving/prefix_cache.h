// Automatic prefix caching: requests that start with tokens another request already computed
// reuse that state instead of prefilling it again (chat histories, agent loops, shared system
// prompts).
//
// DeepSeek-V4 keeps several kinds of state per layer (engine/cache/cache_layout.h): groups that
// keep every row (compressed KV, indexer keys), sliding windows (window KV, the compressor's
// per-token rows) and the DSpark context ring. A block-by-block cache in vLLM's manner shares
// the first kind easily but must snapshot the windows at every block boundary (vLLM's hybrid
// manager and SGLang's SWA radix cache each solve that with a second eviction scheme). Here an
// entry is instead a whole state at one length: a SequenceState::Fork that shares every page
// with the request it was taken from (so all entries along one conversation share their
// compressed KV), plus a copy of the ring. Entries are taken where the engine's steps end
// anyway, so nothing is recomputed for them:
//   - when a prompt has been prefilled (the next turn of a conversation starts with it),
//   - when a request finishes (its answer is in the next turn too, when clients send it back),
//   - at a branch point: the end of the longest run of whole blocks this prompt shares with an
//     earlier one (a system prompt shared by different questions), where the scheduler ends a
//     prefill chunk for the purpose.
// A request reuses the longest entry that is a prefix of its tokens and leaves at least one
// token to compute (a full match is truncated by one token). Entries hold pool pages outside
// any request's lease; the pool asks the cache to evict, least recently used first, whenever it
// runs short, so caching never makes a request wait.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/cache/kv_pool.h"
#include "engine/cache/sequence_state.h"
#include "engine/dspark/drafter_state.h"

namespace pdspark::serving {

struct PrefixCacheStats {
  int64_t queries = 0;            // lookups (requests that could reuse a prefix)
  int64_t query_tokens = 0;       // their tokens
  int64_t hits = 0;               // lookups that reused a prefix
  int64_t hit_tokens = 0;         // tokens not computed thanks to the cache
  int64_t stored = 0;             // entries taken
  int64_t evicted = 0;            // entries dropped to free pages (or beyond max entries)
  int64_t entries = 0;            // held now
  int64_t reclaimable_pages = 0;  // pool pages only entries hold (free for the taking)
};

// A reused prefix: `tokens` tokens already in `state` (and `ring` when the engine drafts).
struct PrefixHit {
  int64_t tokens = 0;
  std::unique_ptr<engine::SequenceState> state;
  std::unique_ptr<dspark::DrafterState> ring;
};

class PrefixCache {
 public:
  // `block_tokens`: the granularity of branch points (and of the hashes the router sees);
  // `max_entries` bounds the host memory entries take (their token lists).
  PrefixCache(engine::KvPool* pool, int64_t block_tokens, int64_t max_entries);
  ~PrefixCache();  // detaches from the pool
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest usable entry for a request about to compute `tokens`: a prefix shorter than
  // `tokens`, whose state holds what a fresh state would (with `keep_rows_from`) and, when
  // `with_ring`, whose ring can follow it. A miss (tokens 0) when there is none.
  PrefixHit Lookup(std::span<const int32_t> tokens, std::span<const int64_t> keep_rows_from,
                   bool with_ring);
  // Where a request computing `tokens` from `computed` on should end a step so that its state
  // there is stored: the last whole block it shares with an earlier prompt, when that is past
  // `computed` and short of the end; else 0. Remembers the prompt's blocks.
  int64_t BranchPoint(std::span<const int32_t> tokens, int64_t computed);
  // Stores the state of `tokens` (state.num_tokens() of them; ring at the same position, or
  // null when the engine does not draft). Its pages are shared, not copied.
  void Store(std::span<const int32_t> tokens, engine::SequenceState& state,
             const dspark::DrafterState* ring);

  // Evicts least recently used entries until `pages` pages of the pool are free, or none is
  // left (the pool's reclaimer).
  void Reclaim(int64_t pages);
  PrefixCacheStats Stats() const;

  // What the worker tells the router (cache events as a snapshot): the length and prefix hash
  // (common/base/prefix_hash.h) of every entry, and a version that changes with the set.
  struct Published {
    uint64_t version = 0;
    std::vector<std::pair<int64_t, uint64_t>> prefixes;  // (tokens, hash)
  };
  Published Publish() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    uint64_t hash = 0;
    std::unique_ptr<engine::SequenceState> state;
    std::unique_ptr<dspark::DrafterState> ring;
  };
  using EntryList = std::list<std::shared_ptr<Entry>>;  // most recently used first

  // Drops entries beyond max_entries_ (least recently used first); returns them to be
  // destroyed outside the lock.
  std::vector<std::shared_ptr<Entry>> TrimLocked();
  void EraseLocked(EntryList::iterator it);
  // The entry of exactly `prefix` (whose hash is `hash`), or lru_.end().
  EntryList::iterator FindLocked(uint64_t hash, std::span<const int32_t> prefix);
  // The reused state for `entry` (a fork, truncated to `tokens`); null when it cannot serve.
  PrefixHit Adopt(const Entry& entry, int64_t tokens, std::span<const int64_t> keep_rows_from,
                  bool with_ring) const;

  engine::KvPool* pool_;
  const int64_t block_tokens_;
  const int64_t max_entries_;

  mutable std::mutex mu_;
  EntryList lru_;
  std::unordered_multimap<uint64_t, EntryList::iterator> by_hash_;
  std::unordered_map<int64_t, int64_t> length_counts_;  // entries per token count
  // Hashes of whole-block prefixes of recent prompts (BranchPoint), with the tick last seen.
  std::unordered_map<uint64_t, uint64_t> seen_blocks_;
  uint64_t tick_ = 0;
  uint64_t version_ = 1;  // bumped whenever an entry is added or dropped
  PrefixCacheStats stats_;
};

}  // namespace pdspark::serving
