// The `model` section of a byte-level BPE tokenizer.json: vocabulary, ranked merges, and the
// merge loop that turns one pre-tokenized word (in GPT-2 symbol form) into token ids. Results
// are cached per word because natural text repeats words constantly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace pdspark::tokenizer {

class BpeModel {
 public:
  // `config` is the tokenizer.json `model` value; merges may be "a b" strings or [a, b] pairs.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& config);

  // Appends the ids of `word`, a pre-token in vocabulary symbol form. Fails only when a
  // symbol has no vocabulary entry and no unk_token is configured.
  Status EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  // Vocabulary lookups (model vocabulary only, not added tokens).
  const int32_t* Find(std::string_view token) const;
  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  BpeModel() = default;
  Status LoadMerges(const nlohmann::json& merges);
  Status MergeSymbols(std::string_view word, std::vector<int32_t>* out) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 17;
  mutable absl::Mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(cache_mutex_);
};

}  // namespace pdspark::tokenizer
