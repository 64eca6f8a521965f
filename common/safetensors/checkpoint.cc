// Checkpoint: a whole model as one tensor namespace, whether it is stored as one file or as
// shards listed in model.safetensors.index.json (the Hugging Face layout).
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "common/base/logging.h"
#include "common/base/strings.h"
#include "common/safetensors/safetensors.h"
#include "common/safetensors/strict_json.h"

namespace pdspark::safetensors {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";
// Real V4 indexes are a few MB (~70k tensors); anything far larger is not an index.
constexpr uint64_t kMaxIndexBytes = 256ull << 20;

Status IndexError(const std::string& index_path, std::string_view what) {
  return absl::InvalidArgumentError(Cat(index_path, ": ", what));
}

StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(Cat(path, ": cannot stat: ", ec.message()));
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        Cat(path, ": ", size, " bytes, larger than the limit of ", max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(Cat(path, ": read failed"));
  return buffer.str();
}

// A shard must name a file in the index's own directory: no paths, so an index cannot reach
// outside the checkpoint.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// weight_map: tensor name -> shard file name.
StatusOr<std::map<std::string, std::string>> ParseIndex(const std::string& index_path) {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path, kMaxIndexBytes));
  StatusOr<Json> json = internal::ParseStrictJson(text);
  if (!json.ok()) return IndexError(index_path, std::string(json.status().message()));
  if (!json->is_object()) return IndexError(index_path, "must be a JSON object");
  auto weight_map = json->find("weight_map");
  if (weight_map == json->end()) return IndexError(index_path, "field 'weight_map' is missing");
  if (!weight_map->is_object())
    return IndexError(index_path, "field 'weight_map' must be an object");
  if (weight_map->empty()) return IndexError(index_path, "field 'weight_map' is empty");
  std::map<std::string, std::string> result;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get_ref<const std::string&>())) {
      return IndexError(index_path, Cat("tensor '", tensor, "': shard must be a plain file name"));
    }
    result.emplace(tensor, shard.get<std::string>());
  }
  return result;
}

}  // namespace

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path) {
  std::error_code ec;
  auto checkpoint = std::make_unique<Checkpoint>();
  if (!fs::is_directory(path, ec)) {
    ASSIGN_OR_RETURN(std::unique_ptr<File> file, File::Open(path));
    checkpoint->directory_ = fs::path(path).parent_path().string();
    checkpoint->files_.push_back(std::move(file));
  } else {
    checkpoint->directory_ = path;
    const std::string index_path = (fs::path(path) / kIndexName).string();
    const std::string single_path = (fs::path(path) / kSingleName).string();
    if (fs::exists(index_path, ec)) {
      RETURN_IF_ERROR(checkpoint->OpenSharded(index_path));
      return checkpoint;
    }
    if (!fs::exists(single_path, ec)) {
      return absl::NotFoundError(
          Cat(path, ": no ", kIndexName, " or ", kSingleName, " in directory"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<File> file, File::Open(single_path));
    checkpoint->files_.push_back(std::move(file));
  }
  const File* only = checkpoint->files_.front().get();
  for (const auto& [name, info] : only->header().tensors) checkpoint->index_.emplace(name, only);
  return checkpoint;
}

StatusOr<std::shared_ptr<const Checkpoint>> Checkpoint::OpenShared(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const Checkpoint>> open;
  std::error_code ec;
  const std::string key = fs::weakly_canonical(path, ec).string();
  std::lock_guard lock(mu);
  if (std::shared_ptr<const Checkpoint> held = open[key].lock()) return held;
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Open(path));
  std::shared_ptr<const Checkpoint> shared = std::move(checkpoint);
  open[key] = shared;
  return shared;
}

Status Checkpoint::OpenSharded(const std::string& index_path) {
  ASSIGN_OR_RETURN(auto weight_map, ParseIndex(index_path));
  std::map<std::string, const File*> shards;  // shard file name -> opened file
  for (const auto& [tensor, shard] : weight_map) {
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const std::string shard_path = (fs::path(directory_) / shard).string();
      StatusOr<std::unique_ptr<File>> file = File::Open(shard_path);
      if (!file.ok()) {
        return Status(file.status().code(),
                      Cat(index_path, ": shard '", shard, "' (listed for tensor '", tensor,
                          "'): ", file.status().message()));
      }
      files_.push_back(*std::move(file));
      it = shards.emplace(shard, files_.back().get()).first;
    }
    if (!it->second->Contains(tensor)) {
      return absl::NotFoundError(Cat(index_path, ": tensor '", tensor, "' is listed in shard '",
                                     shard, "' but absent from it"));
    }
    index_.emplace(tensor, it->second);
  }
  size_t unlisted = 0;
  for (const auto& file : files_) {
    for (const auto& [name, info] : file->header().tensors) unlisted += !index_.contains(name);
  }
  if (unlisted > 0) {
    LOG_WARN("checkpoint {}: {} tensors in shards are not in the index and are ignored", directory_,
             unlisted);
  }
  return absl::OkStatus();
}

bool Checkpoint::Contains(std::string_view name) const { return index_.find(name) != index_.end(); }

StatusOr<TensorView> Checkpoint::Get(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(Cat(directory_, ": tensor '", name, "' not found in checkpoint"));
  }
  return it->second->Get(name);
}

void Checkpoint::ReleasePages(const void* data, size_t bytes) const {
  for (const auto& file : files_) {
    if (file->ReleasePages(data, bytes)) return;
  }
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, file] : index_) names.push_back(name);
  return names;
}

}  // namespace pdspark::safetensors
