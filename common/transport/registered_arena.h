// Host memory allocated and registered once by a transfer agent (AllocateMemory: shared-memory
// peers can map it) and carved into per-request ranges (first fit, 4 KiB aligned): the decode
// worker's staging arena that prefill workers write into, and the prefill worker's send
// buffers the writes are posted from.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/base/status.h"
#include "common/transport/transfer_agent.h"

namespace pdspark::transport {

class RegisteredArena {
 public:
  // `what` names the arena in errors and logs ("KV staging arena").
  static StatusOr<std::unique_ptr<RegisteredArena>> Create(TransferAgent* agent, uint64_t bytes,
                                                           std::string what);
  ~RegisteredArena();

  // ResourceExhausted when no free range of `size` bytes is left.
  StatusOr<uint64_t> Allocate(uint64_t size);
  void Free(uint64_t offset);

  char* data() { return static_cast<char*>(region_.base); }
  uint64_t size() const { return size_; }
  const LocalRegion& region() const { return region_; }
  uint64_t bytes_in_use() const;
  static uint64_t AlignUp(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  uint64_t BytesInUseLocked() const;
  static constexpr uint64_t kAlignment = 4096;
  RegisteredArena() = default;

  TransferAgent* agent_ = nullptr;
  std::string what_;
  uint64_t size_ = 0;
  LocalRegion region_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> used_;  // offset -> size
};

}  // namespace pdspark::transport
