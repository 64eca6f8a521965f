// File: one memory-mapped .safetensors file. The mapping is read-only and private, so tensor
// views are zero-copy and stay valid for the File's lifetime.
#include "common/safetensors/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/base/strings.h"

namespace pdspark::safetensors {
namespace {

constexpr size_t kLengthPrefixBytes = 8;

// Keeps the status code, prefixes the message with the file path.
Status Prefixed(std::string_view path, const Status& status) {
  return Status(status.code(), Cat(path, ": ", status.message()));
}

Status Errno(std::string_view path, std::string_view what) {
  const int error = errno;
  const std::string message = Cat(path, ": ", what, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

uint64_t ReadLittleEndian64(const std::byte* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::to_integer<uint64_t>(bytes[i]);
  return value;
}

// Owns the descriptor only until the mapping exists (the mapping outlives the descriptor).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

StatusOr<std::unique_ptr<File>> File::Open(const std::string& path) {
  FdCloser fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return Errno(path, "cannot open");
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return Errno(path, "cannot stat");
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(Cat(path, ": not a file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kLengthPrefixBytes) {
    return absl::InvalidArgumentError(
        Cat(path, ": truncated: ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (map == MAP_FAILED) return Errno(path, "mmap failed");
  std::unique_ptr<File> file(new File());
  file->path_ = path;
  file->map_ = static_cast<const std::byte*>(map);
  file->map_size_ = size;
  const uint64_t header_bytes = ReadLittleEndian64(file->map_);
  if (header_bytes > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        Cat(path, ": header length ", header_bytes, " exceeds the limit of ", kMaxHeaderBytes));
  }
  if (header_bytes > size - kLengthPrefixBytes) {
    return absl::InvalidArgumentError(Cat(path, ": header length ", header_bytes,
                                          " runs past the end of the file (", size, " bytes)"));
  }
  const std::string_view json(reinterpret_cast<const char*>(file->map_) + kLengthPrefixBytes,
                              header_bytes);
  const uint64_t data_size = size - kLengthPrefixBytes - header_bytes;
  StatusOr<Header> header = ParseHeader(json, data_size);
  if (!header.ok()) return Prefixed(path, header.status());
  file->header_ = *std::move(header);
  file->data_ = file->map_ + kLengthPrefixBytes + header_bytes;
  return file;
}

File::~File() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_size_);
}

bool File::ReleasePages(const void* data, size_t bytes) const {
  const auto* begin = static_cast<const std::byte*>(data);
  if (begin < map_ || bytes > map_size_ ||
      begin - map_ > static_cast<ptrdiff_t>(map_size_ - bytes)) {
    return false;
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  return true;
}

bool File::Contains(std::string_view name) const {
  return header_.tensors.find(std::string(name)) != header_.tensors.end();
}

StatusOr<TensorView> File::Get(std::string_view name) const {
  auto it = header_.tensors.find(std::string(name));
  if (it == header_.tensors.end()) {
    return absl::NotFoundError(Cat(path_, ": tensor '", name, "' not found"));
  }
  const TensorInfo& info = it->second;
  return TensorView{.name = it->first,
                    .dtype = info.dtype,
                    .shape = info.shape,
                    .data = {data_ + info.begin, static_cast<size_t>(info.end - info.begin)}};
}

std::vector<std::string> File::Names() const {
  std::vector<std::string> names;
  names.reserve(header_.tensors.size());
  for (const auto& [name, info] : header_.tensors) names.push_back(name);
  return names;
}

}  // namespace pdspark::safetensors
