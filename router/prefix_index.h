// An approximate record, per worker, of the prompt prefixes the router has sent it (SGLang's
// cache_aware idea: no KV events needed). Prompts are cut into fixed blocks; each block is keyed
// by a hash chained over everything before it, so "block i is present" means "this whole prefix
// was sent". The workers' caches evict on their own, so this is a hint, bounded by an LRU cap.
// Workers that report their prefix cache (heartbeats) are scored by the report; this index then
// only covers what was sent to them since their last report.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace pdspark::router {

class PrefixIndex {
 public:
  explicit PrefixIndex(uint32_t block_tokens = 16, size_t max_blocks_per_worker = 1 << 16);

  // Prompt tokens (whole blocks) that `worker_id` has already seen as a prefix of `prompt`.
  uint32_t OverlapTokens(const std::string& worker_id, const std::vector<uint32_t>& prompt) const;
  // Notes that `prompt` was sent to `worker_id`.
  void Record(const std::string& worker_id, const std::vector<uint32_t>& prompt);
  // Drops workers not in `live` (gone or replaced incarnations).
  void Retain(const std::vector<std::string>& live);
  // A worker reported what its prefix cache holds (`report` identifies that report): what was
  // sent to it before is superseded by the report, so it is forgotten once per new report.
  void Supersede(const std::string& worker_id, const void* report);

  uint32_t block_tokens() const { return block_tokens_; }

 private:
  struct WorkerBlocks {
    const void* report = nullptr;  // the last report that superseded what was sent
    std::list<uint64_t> lru;       // front = most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  std::vector<uint64_t> BlockHashes(const std::vector<uint32_t>& prompt) const;

  const uint32_t block_tokens_;
  const size_t max_blocks_;
  mutable std::mutex mu_;
  std::map<std::string, WorkerBlocks> workers_;
};

}  // namespace pdspark::router
