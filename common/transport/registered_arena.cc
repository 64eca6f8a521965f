#include "common/transport/registered_arena.h"

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::transport {

StatusOr<std::unique_ptr<RegisteredArena>> RegisteredArena::Create(TransferAgent* agent,
                                                                   uint64_t bytes,
                                                                   std::string what) {
  std::unique_ptr<RegisteredArena> arena(new RegisteredArena);
  arena->agent_ = agent;
  arena->what_ = std::move(what);
  arena->size_ = AlignUp(bytes);
  auto region = agent->AllocateMemory(arena->size_);
  if (!region.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a ", arena->what_, " of ",
                                                     arena->size_, " bytes: ",
                                                     region.status().message()));
  }
  arena->region_ = *std::move(region);
  LOG_INFO("{} registered bytes={} transport={}", arena->what_, arena->size_,
           agent->TransportName());
  return arena;
}

RegisteredArena::~RegisteredArena() {
  if (agent_ && region_.id) agent_->DeregisterMemory(region_.id).IgnoreError();
}

StatusOr<uint64_t> RegisteredArena::Allocate(uint64_t size) {
  size = AlignUp(size);
  std::lock_guard lock(mu_);
  uint64_t candidate = 0;
  for (const auto& [offset, used] : used_) {
    if (offset - candidate >= size) break;
    candidate = offset + used;
  }
  if (candidate + size > size_) {
    return absl::ResourceExhaustedError(absl::StrCat(what_, " full: need ", size, " bytes, ",
                                                     size_ - BytesInUseLocked(), " of ", size_,
                                                     " free"));
  }
  used_[candidate] = size;
  return candidate;
}

void RegisteredArena::Free(uint64_t offset) {
  std::lock_guard lock(mu_);
  used_.erase(offset);
}

uint64_t RegisteredArena::bytes_in_use() const {
  std::lock_guard lock(mu_);
  return BytesInUseLocked();
}

uint64_t RegisteredArena::BytesInUseLocked() const {
  uint64_t total = 0;
  for (const auto& [offset, size] : used_) total += size;
  return total;
}

}  // namespace pdspark::transport
