// Read-only, memory-mapped access to safetensors checkpoints: one file or a sharded directory
// (model.safetensors.index.json). The header is validated strictly before any tensor is handed
// out, so a corrupt or truncated file yields an error naming the file and tensor, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace pdspark::safetensors {

enum class DType {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // "F8_E4M3"
  kF8E8M0,  // "F8_E8M0": power-of-two scales
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
};

// Parses the safetensors dtype string ("BF16", "F8_E4M3", ...).
StatusOr<DType> ParseDType(std::string_view name);
std::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

// A view of one tensor's bytes inside a mapped file. Valid while the owning File lives.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;

  int64_t NumElements() const;
  template <typename T>
  std::span<const T> As() const {
    return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
  }
};

// The largest header accepted; the format itself caps it at 100 MB.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Parses and validates a header (the JSON after the 8-byte length) against the size of the data
// section that follows it. Exposed separately so it can be fuzzed without files.
struct TensorInfo {
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets relative to the start of the data section
  uint64_t end = 0;
};
struct Header {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};
StatusOr<Header> ParseHeader(std::string_view json, uint64_t data_size);

// One memory-mapped .safetensors file.
class File {
 public:
  static StatusOr<std::unique_ptr<File>> Open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  bool Contains(std::string_view name) const;
  // NotFound naming file and tensor when absent.
  StatusOr<TensorView> Get(std::string_view name) const;
  std::vector<std::string> Names() const;
  // Drops this process's copies of the mapping's whole pages inside [data, data + bytes), if
  // that range lies in this file's mapping (else does nothing): for tensors read once and kept
  // in another form. The file is mapped read-only, so a later read faults the pages in again from
  // the page cache or the disk; nothing is lost. Whether the range was this file's.
  bool ReleasePages(const void* data, size_t bytes) const;

 private:
  File() = default;
  std::string path_;
  Header header_;
  const std::byte* map_ = nullptr;
  size_t map_size_ = 0;
  const std::byte* data_ = nullptr;  // start of the data section
};

// A checkpoint directory: every shard listed in model.safetensors.index.json, or a single
// model.safetensors, or a single given .safetensors file path.
class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path);
  // The same Checkpoint object for every caller in this process while one of them holds it, so
  // the target model, its drafter and every tensor-parallel rank share one mapping of the files
  // (each mapping's resident pages count in the process's RSS). Keyed by the canonical path.
  static StatusOr<std::shared_ptr<const Checkpoint>> OpenShared(const std::string& path);

  bool Contains(std::string_view name) const;
  StatusOr<TensorView> Get(std::string_view name) const;
  std::vector<std::string> Names() const;  // sorted
  size_t NumFiles() const { return files_.size(); }
  // File::ReleasePages on the shard that holds [data, data + bytes), if one does.
  void ReleasePages(const void* data, size_t bytes) const;
  const std::string& directory() const { return directory_; }

 private:
  // Opens every shard named in the index; each listed tensor must exist in its shard.
  Status OpenSharded(const std::string& index_path);

  std::string directory_;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, const File*, std::less<>> index_;  // tensor name -> file
};

}  // namespace pdspark::safetensors
