#include "engine/serving/prefix_cache.h"

#include <algorithm>

#include "common/base/prefix_hash.h"

namespace pdspark::serving {
namespace {

// Block hashes remembered for branch points: enough for thousands of recent prompts.
constexpr size_t kMaxSeenBlocks = 1 << 18;

}  // namespace

PrefixCache::PrefixCache(engine::KvPool* pool, int64_t block_tokens, int64_t max_entries)
    : pool_(pool), block_tokens_(std::max<int64_t>(1, block_tokens)), max_entries_(max_entries) {
  pool_->SetReclaimer([this](int64_t pages) { Reclaim(pages); });
}

PrefixCache::~PrefixCache() {
  pool_->SetReclaimer(nullptr);
  std::lock_guard lock(mu_);
  lru_.clear();  // entries give their pages back
  by_hash_.clear();
}

PrefixHit PrefixCache::Lookup(std::span<const int32_t> tokens,
                              std::span<const int64_t> keep_rows_from, bool with_ring) {
  const std::vector<uint64_t> hashes = PrefixHashes(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<std::pair<int64_t, std::shared_ptr<Entry>>> candidates;  // longest first
  {
    std::lock_guard lock(mu_);
    ++stats_.queries;
    stats_.query_tokens += n;
    std::vector<int64_t> lengths;
    for (const auto& [length, count] : length_counts_) {
      if (length <= n && count > 0) lengths.push_back(length);
    }
    std::sort(lengths.rbegin(), lengths.rend());
    for (int64_t length : lengths) {
      auto it = FindLocked(hashes[length], tokens.first(length));
      if (it == lru_.end()) continue;
      candidates.emplace_back(length, *it);
      lru_.splice(lru_.begin(), lru_, it);
    }
  }
  // Adopting allocates (a ring copy), which may reclaim: outside the lock.
  for (const auto& [length, entry] : candidates) {
    PrefixHit hit = Adopt(*entry, std::min(length, n - 1), keep_rows_from, with_ring);
    if (hit.tokens == 0) continue;
    std::lock_guard lock(mu_);
    ++stats_.hits;
    stats_.hit_tokens += hit.tokens;
    return hit;
  }
  return {};
}

PrefixHit PrefixCache::Adopt(const Entry& entry, int64_t tokens,
                             std::span<const int64_t> keep_rows_from, bool with_ring) const {
  if (tokens <= 0 || (with_ring && !entry.ring)) return {};
  PrefixHit hit;
  auto fork = entry.state->Fork();
  if (!fork.ok()) return {};
  hit.state = *std::move(fork);
  if (!hit.state->Truncate(tokens).ok()) return {};
  hit.state->KeepRowsFrom({keep_rows_from.begin(), keep_rows_from.end()});
  hit.state->ReleaseOutOfWindow();
  if (!hit.state->HoldsRowsOfAFreshState(keep_rows_from)) return {};
  if (with_ring) {
    auto ring = entry.ring->Clone();
    if (!ring.ok() || !(*ring)->Truncate(tokens).ok()) return {};
    hit.ring = *std::move(ring);
  }
  hit.tokens = tokens;
  return hit;
}

int64_t PrefixCache::BranchPoint(std::span<const int32_t> tokens, int64_t computed) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::lock_guard lock(mu_);
  ++tick_;
  int64_t shared = 0;
  uint64_t hash = kEmptyPrefixHash;
  std::vector<uint64_t> blocks;
  for (int64_t end = 0; end + block_tokens_ <= n; end += block_tokens_) {
    for (int64_t i = end; i < end + block_tokens_; ++i) hash = ExtendPrefixHash(hash, tokens[i]);
    blocks.push_back(hash);
    if (shared == end && seen_blocks_.contains(hash)) shared = end + block_tokens_;
  }
  for (uint64_t block : blocks) seen_blocks_[block] = tick_;
  if (seen_blocks_.size() > kMaxSeenBlocks) {
    // Forget the older half.
    std::vector<uint64_t> ticks;
    for (const auto& [block, seen] : seen_blocks_) ticks.push_back(seen);
    std::nth_element(ticks.begin(), ticks.begin() + ticks.size() / 2, ticks.end());
    const uint64_t cutoff = ticks[ticks.size() / 2];
    std::erase_if(seen_blocks_, [cutoff](const auto& kv) { return kv.second < cutoff; });
  }
  return shared > computed && shared < n ? shared : 0;
}

void PrefixCache::Store(std::span<const int32_t> tokens, engine::SequenceState& state,
                        const dspark::DrafterState* ring) {
  const int64_t length = state.num_tokens();
  if (length <= 0 || length > static_cast<int64_t>(tokens.size())) return;
  if (ring != nullptr && ring->num_positions() != length) return;
  const uint64_t hash = PrefixHash(tokens.first(length));
  {
    std::lock_guard lock(mu_);
    if (auto it = FindLocked(hash, tokens.first(length)); it != lru_.end()) {
      lru_.splice(lru_.begin(), lru_, it);
      return;  // already stored
    }
  }
  auto entry = std::make_shared<Entry>();
  entry->tokens.assign(tokens.begin(), tokens.begin() + length);
  entry->hash = hash;
  // The entry takes copies of the partly filled last pages: the request goes on writing its own
  // (a prefill worker's transfer may be reading them), and nothing ever writes the entry's.
  auto fork = state.Fork(engine::PageHolder::kCache, /*own_last_pages=*/true);
  if (!fork.ok()) return;
  entry->state = *std::move(fork);
  if (ring != nullptr) {
    auto copy = ring->Clone(engine::PageHolder::kCache);  // may reclaim: outside the lock
    if (!copy.ok()) return;
    entry->ring = *std::move(copy);
  }
  std::vector<std::shared_ptr<Entry>> dropped;
  {
    std::lock_guard lock(mu_);
    lru_.push_front(std::move(entry));
    by_hash_.emplace(hash, lru_.begin());
    ++length_counts_[length];
    ++stats_.stored;
    ++version_;
    dropped = TrimLocked();
  }
}

PrefixCache::EntryList::iterator PrefixCache::FindLocked(uint64_t hash,
                                                         std::span<const int32_t> prefix) {
  auto [begin, end] = by_hash_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    const std::vector<int32_t>& tokens = (*it->second)->tokens;
    if (std::equal(tokens.begin(), tokens.end(), prefix.begin(), prefix.end())) return it->second;
  }
  return lru_.end();
}

std::vector<std::shared_ptr<PrefixCache::Entry>> PrefixCache::TrimLocked() {
  std::vector<std::shared_ptr<Entry>> dropped;
  while (static_cast<int64_t>(lru_.size()) > max_entries_) {
    dropped.push_back(lru_.back());
    EraseLocked(std::prev(lru_.end()));
  }
  return dropped;
}

void PrefixCache::EraseLocked(EntryList::iterator it) {
  const Entry& entry = **it;
  auto [begin, end] = by_hash_.equal_range(entry.hash);
  for (auto h = begin; h != end; ++h) {
    if (h->second == it) {
      by_hash_.erase(h);
      break;
    }
  }
  if (--length_counts_[static_cast<int64_t>(entry.tokens.size())] == 0) {
    length_counts_.erase(static_cast<int64_t>(entry.tokens.size()));
  }
  ++stats_.evicted;
  ++version_;
  lru_.erase(it);
}

void PrefixCache::Reclaim(int64_t pages) {
  while (pool_->free_pages() < pages) {
    std::shared_ptr<Entry> victim;
    {
      std::lock_guard lock(mu_);
      if (lru_.empty()) return;
      victim = lru_.back();
      EraseLocked(std::prev(lru_.end()));
    }
    victim.reset();  // its pages go back (those no request shares) outside the lock
  }
}

PrefixCache::Published PrefixCache::Publish() const {
  std::lock_guard lock(mu_);
  Published out;
  out.version = version_;
  for (const auto& entry : lru_) {
    out.prefixes.emplace_back(static_cast<int64_t>(entry->tokens.size()), entry->hash);
  }
  return out;
}

PrefixCacheStats PrefixCache::Stats() const {
  std::lock_guard lock(mu_);
  PrefixCacheStats stats = stats_;
  stats.entries = static_cast<int64_t>(lru_.size());
  stats.reclaimable_pages = pool_->reclaimable_pages();
  return stats;
}

}  // namespace pdspark::serving
