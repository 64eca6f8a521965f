#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/transport/transfer_agent.h"

namespace pdspark::transport {
namespace {

constexpr uint32_t kMagic = 0x70647231;  // "pdr1"

void AppendU64(std::string& out, uint64_t value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

// Layout: magic u32, base u64, size u64, key length u64, key bytes (host byte order: both ends
// run the same build on the same architecture, which the link handshake checks).
std::string RemoteRegion::Serialize() const {
  std::string out;
  out.append(reinterpret_cast<const char*>(&kMagic), sizeof(kMagic));
  AppendU64(out, base);
  AppendU64(out, size);
  AppendU64(out, packed_key.size());
  out += packed_key;
  return out;
}

StatusOr<RemoteRegion> RemoteRegion::Deserialize(std::string_view bytes) {
  constexpr size_t kFixed = sizeof(uint32_t) + 3 * sizeof(uint64_t);
  if (bytes.size() < kFixed) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote region descriptor too short: ", bytes.size(), " bytes"));
  }
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), sizeof(magic));
  if (magic != kMagic) return absl::InvalidArgumentError("remote region descriptor: bad magic");
  RemoteRegion region;
  uint64_t key_size;
  const char* p = bytes.data() + sizeof(magic);
  std::memcpy(&region.base, p, 8);
  std::memcpy(&region.size, p + 8, 8);
  std::memcpy(&key_size, p + 16, 8);
  if (key_size != bytes.size() - kFixed) {
    return absl::InvalidArgumentError(absl::StrCat("remote region descriptor: key length ",
                                                   key_size, " does not match ",
                                                   bytes.size() - kFixed, " remaining bytes"));
  }
  region.packed_key.assign(bytes.data() + kFixed, key_size);
  return region;
}

}  // namespace pdspark::transport
