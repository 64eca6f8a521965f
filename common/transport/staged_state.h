// The framing of one request's state in a decode worker's staging memory: a fixed header with
// the payload size and a checksum, written by the prefill worker in the same RMA as the
// payload, so the decode side can tell a complete delivery from a missing or torn one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/base/status.h"

namespace pdspark::transport {

struct StagedHeader {
  uint64_t magic = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
};

inline constexpr uint64_t kStagedMagic = 0x3174617473647070ull;  // "ppdstat1"

// 64-bit FNV-1a over the payload.
uint64_t Checksum(std::string_view bytes);

StagedHeader MakeStagedHeader(std::string_view payload);

// Validates the header at the start of `staging` (capacity bytes) and returns the payload.
StatusOr<std::string> ReadStaged(const char* staging, uint64_t capacity);

}  // namespace pdspark::transport
