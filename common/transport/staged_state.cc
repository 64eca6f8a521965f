#include "common/transport/staged_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdspark::transport {

uint64_t Checksum(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

StagedHeader MakeStagedHeader(std::string_view payload) {
  return {kStagedMagic, payload.size(), Checksum(payload)};
}

StatusOr<std::string> ReadStaged(const char* staging, uint64_t capacity) {
  StagedHeader header;
  if (capacity < sizeof(header)) return absl::DataLossError("staging range smaller than a header");
  std::memcpy(&header, staging, sizeof(header));
  if (header.magic != kStagedMagic) {
    return absl::DataLossError("no state was delivered into the reservation");
  }
  if (header.payload_bytes > capacity - sizeof(header)) {
    return absl::DataLossError(absl::StrCat("delivered state claims ", header.payload_bytes,
                                            " bytes, the reservation holds ",
                                            capacity - sizeof(header)));
  }
  std::string payload(staging + sizeof(header), header.payload_bytes);
  if (Checksum(payload) != header.checksum) {
    return absl::DataLossError("delivered state failed its checksum (torn or partial transfer)");
  }
  return payload;
}

}  // namespace pdspark::transport
