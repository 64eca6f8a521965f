// Shared by the mutation-fuzz test and the libFuzzer target: treats bytes as a safetensors file
// and checks that whatever the parser accepts is safe to use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/safetensors/safetensors.h"

namespace pdspark::safetensors::testing {

// Aborts when an accepted header breaks an invariant the reader relies on.
inline void CheckAcceptedHeader(const Header& header, uint64_t data_size) {
  for (const auto& [name, info] : header.tensors) {
    if (info.begin > info.end || info.end > data_size) std::abort();
    uint64_t bytes = DTypeSize(info.dtype);
    for (int64_t dim : info.shape) {
      if (dim < 0) std::abort();
      bytes *= static_cast<uint64_t>(dim);
    }
    if (bytes != info.end - info.begin) std::abort();
  }
}

// Parses `file` the way File::Open does (length prefix, header, data section) and, when it is
// accepted, reads every tensor byte so a sanitizer sees any out-of-bounds view. Also parses the
// header alone against a huge virtual data section, so header-only seeds reach deep paths.
// Returns the number of tensors accepted (for coverage of the test itself).
inline size_t ProbeFile(std::string_view file) {
  if (file.size() < 8) return 0;
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(file[i]);
  if (length > kMaxHeaderBytes || length > file.size() - 8) return 0;
  const std::string_view json = file.substr(8, length);
  const std::string_view data = file.substr(8 + length);
  size_t accepted = 0;
  if (StatusOr<Header> header = ParseHeader(json, data.size()); header.ok()) {
    CheckAcceptedHeader(*header, data.size());
    // volatile: the reads must happen so a sanitizer can see them.
    volatile unsigned char sink = 0;
    for (const auto& [name, info] : header->tensors) {
      for (uint64_t i = info.begin; i < info.end; ++i) sink = sink ^ data[i];
    }
    accepted += header->tensors.size();
  }
  constexpr uint64_t kVirtualDataSize = 1ull << 40;
  if (StatusOr<Header> header = ParseHeader(json, kVirtualDataSize); header.ok()) {
    CheckAcceptedHeader(*header, kVirtualDataSize);
    accepted += header->tensors.size();
  }
  return accepted;
}

}  // namespace pdspark::safetensors::testing
