#include "router/prefix_index.h"

#include <set>

namespace pdspark::router {
namespace {

// splitmix64 finalizer: cheap, well mixed, stable across runs (unlike std::hash).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixIndex::PrefixIndex(uint32_t block_tokens, size_t max_blocks_per_worker)
    : block_tokens_(block_tokens), max_blocks_(max_blocks_per_worker) {}

std::vector<uint64_t> PrefixIndex::BlockHashes(const std::vector<uint32_t>& prompt) const {
  std::vector<uint64_t> hashes;
  uint64_t h = 0;
  for (size_t i = 0; i + block_tokens_ <= prompt.size(); i += block_tokens_) {
    for (size_t k = i; k < i + block_tokens_; ++k) h = Mix(h ^ prompt[k]);
    hashes.push_back(h);
  }
  return hashes;
}

uint32_t PrefixIndex::OverlapTokens(const std::string& worker_id,
                                    const std::vector<uint32_t>& prompt) const {
  const std::vector<uint64_t> hashes = BlockHashes(prompt);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return 0;
  uint32_t blocks = 0;
  while (blocks < hashes.size() && it->second.where.count(hashes[blocks]) > 0) ++blocks;
  return blocks * block_tokens_;
}

void PrefixIndex::Record(const std::string& worker_id, const std::vector<uint32_t>& prompt) {
  const std::vector<uint64_t> hashes = BlockHashes(prompt);
  std::lock_guard<std::mutex> lock(mu_);
  WorkerBlocks& w = workers_[worker_id];
  for (uint64_t h : hashes) {
    auto found = w.where.find(h);
    if (found != w.where.end()) w.lru.erase(found->second);
    w.lru.push_front(h);
    w.where[h] = w.lru.begin();
  }
  while (w.lru.size() > max_blocks_) {
    w.where.erase(w.lru.back());
    w.lru.pop_back();
  }
}

void PrefixIndex::Retain(const std::vector<std::string>& live) {
  const std::set<std::string> keep(live.begin(), live.end());
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(workers_, [&](const auto& kv) { return keep.count(kv.first) == 0; });
}

void PrefixIndex::Supersede(const std::string& worker_id, const void* report) {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerBlocks& blocks = workers_[worker_id];
  if (blocks.report == report) return;
  blocks.report = report;
  blocks.lru.clear();
  blocks.where.clear();
}

}  // namespace pdspark::router
