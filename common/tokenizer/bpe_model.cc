#include "common/tokenizer/bpe_model.h"

#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/strings.h"
#include "common/tokenizer/utf8.h"

namespace pdspark::tokenizer {
namespace {

using nlohmann::json;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

bool IsUnset(const json& config, const char* key) {
  return !config.contains(key) || config.at(key).is_null() ||
         (config.at(key).is_string() && config.at(key).get<std::string>().empty());
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& config) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  try {
    if (config.value("type", std::string("BPE")) != "BPE") {
      return absl::UnimplementedError(
          absl::StrCat("unsupported model type '", config.at("type").get<std::string>(), "'"));
    }
    if (!IsUnset(config, "continuing_subword_prefix") || !IsUnset(config, "end_of_word_suffix")) {
      return absl::UnimplementedError(
          "BPE continuing_subword_prefix / end_of_word_suffix are not supported");
    }
    if (config.value("byte_fallback", false)) {
      return absl::UnimplementedError("BPE byte_fallback is not supported");
    }
    if (!IsUnset(config, "dropout") && config.at("dropout").get<double>() > 0) {
      LOG_WARN("tokenizer: ignoring BPE dropout={} (inference is deterministic)",
               config.at("dropout").get<double>());
    }
    for (const auto& [token, id] : config.at("vocab").items()) {
      const int64_t value = id.get<int64_t>();
      if (value < 0 || value > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("vocab id out of range: ", value));
      }
      model->vocab_.emplace(token, static_cast<int32_t>(value));
    }
    RETURN_IF_ERROR(model->LoadMerges(config.at("merges")));
    model->fuse_unk_ = config.value("fuse_unk", false);
    model->ignore_merges_ = config.value("ignore_merges", false);
    if (!IsUnset(config, "unk_token")) {
      const std::string unk = config.at("unk_token").get<std::string>();
      const int32_t* id = model->Find(unk);
      if (id == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("unk_token '", unk, "' not in vocab"));
      }
      model->unk_id_ = *id;
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad BPE model section: ", e.what()));
  }
  return model;
}

Status BpeModel::LoadMerges(const json& merges) {
  int32_t rank = 0;
  for (const json& merge : merges) {
    std::string left;
    std::string right;
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("merge #", rank, " '", line, "' is not two space-separated tokens"));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("merge #", rank, " has a bad shape"));
    }
    const int32_t* left_id = Find(left);
    const int32_t* right_id = Find(right);
    const int32_t* merged_id = Find(left + right);
    if (left_id == nullptr || right_id == nullptr || merged_id == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge #", rank, " '", left, " ", right, "' uses a token not in vocab"));
    }
    // The first occurrence of a pair defines its rank, as in HF.
    merges_.try_emplace(PairKey(*left_id, *right_id), Merge{rank, *merged_id});
    ++rank;
  }
  return absl::OkStatus();
}

const int32_t* BpeModel::Find(std::string_view token) const {
  const auto it = vocab_.find(ToAbsl(token));
  return it == vocab_.end() ? nullptr : &it->second;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

Status BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::MutexLock lock(&cache_mutex_);
    const auto it = cache_.find(ToAbsl(word));
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  std::vector<int32_t> out;
  RETURN_IF_ERROR(MergeSymbols(word, &out));
  ids->insert(ids->end(), out.begin(), out.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();  // bounded memory, simple eviction
    cache_.emplace(std::string(word), std::move(out));
  }
  return absl::OkStatus();
}

Status BpeModel::MergeSymbols(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    if (const int32_t* id = Find(word)) {
      out->push_back(*id);
      return absl::OkStatus();
    }
  }
  // Symbols form a doubly linked list; a dead symbol has id -1.
  struct Symbol {
    int32_t id;
    int prev;
    int next;
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = Utf8CharLength(word, pos);
    const int32_t* id = Find(word.substr(pos, len));
    if (id == nullptr) {
      if (unk_id_ < 0) {
        return absl::InternalError(absl::StrCat("symbol '", ToAbsl(word.substr(pos, len)),
                                                "' has no vocabulary entry and no unk_token"));
      }
      if (!(fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_)) {
        symbols.push_back({unk_id_, static_cast<int>(symbols.size()) - 1, -1});
      }
    } else {
      symbols.push_back({*id, static_cast<int>(symbols.size()) - 1, -1});
    }
    pos += len;
  }
  const int n = static_cast<int>(symbols.size());
  for (int i = 0; i + 1 < n; ++i) symbols[i].next = i + 1;

  // Candidate merges ordered by (rank, position), validated lazily when popped.
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left;
    int32_t right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int pos) {
    const int next = symbols[pos].next;
    if (next < 0) return;
    if (const Merge* m = FindMerge(symbols[pos].id, symbols[next].id)) {
      queue.push({m->rank, pos, symbols[pos].id, symbols[next].id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;
    Symbol& right = symbols[left.next];
    left.id = FindMerge(c.left, c.right)->merged_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    right.id = -1;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = symbols[i].next) out->push_back(symbols[i].id);
  return absl::OkStatus();
}

}  // namespace pdspark::tokenizer
