#include "common/transport/in_process_agent.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdspark::transport {
namespace {

// Live agents by address, so Connect/Write can find the peer.
std::mutex registry_mu;
std::map<std::string, InProcessAgent*>& Registry() {
  static auto* registry = new std::map<std::string, InProcessAgent*>;
  return *registry;
}

}  // namespace

InProcessAgent::InProcessAgent() {
  static std::atomic<uint64_t> counter{0};
  address_ = absl::StrCat("inprocess:", ++counter);
  std::lock_guard lock(registry_mu);
  Registry()[address_] = this;
}

InProcessAgent::~InProcessAgent() {
  std::lock_guard lock(registry_mu);
  Registry().erase(address_);
}

StatusOr<LocalRegion> InProcessAgent::RegisterMemory(void* base, size_t size, MemoryKind kind) {
  if (kind != MemoryKind::kHost) {
    return absl::UnimplementedError("the in-process agent copies host memory only");
  }
  std::lock_guard lock(mu_);
  LocalRegion region;
  region.id = next_region_id_++;
  region.base = base;
  region.size = size;
  region.remote.base = reinterpret_cast<uint64_t>(base);
  region.remote.size = size;
  region.remote.packed_key = absl::StrCat(address_, "/", region.id);
  regions_[region.id] = region;
  return region;
}

StatusOr<LocalRegion> InProcessAgent::AllocateMemory(size_t size) {
  auto memory = std::make_unique<char[]>(size);
  ASSIGN_OR_RETURN(LocalRegion region, RegisterMemory(memory.get(), size, MemoryKind::kHost));
  std::lock_guard lock(mu_);
  allocated_[region.id] = std::move(memory);
  return region;
}

Status InProcessAgent::DeregisterMemory(uint64_t region_id) {
  std::lock_guard lock(mu_);
  allocated_.erase(region_id);
  if (regions_.erase(region_id) == 0) {
    return absl::NotFoundError(absl::StrCat("region ", region_id));
  }
  return absl::OkStatus();
}

Status InProcessAgent::Connect(const std::string& peer_id, const std::string& peer_address) {
  {
    std::lock_guard lock(registry_mu);
    if (!Registry().contains(peer_address)) {
      return absl::UnavailableError(absl::StrCat("no in-process agent at ", peer_address));
    }
  }
  std::lock_guard lock(mu_);
  peers_[peer_id] = peer_address;
  return absl::OkStatus();
}

Status InProcessAgent::Disconnect(const std::string& peer_id) {
  std::lock_guard lock(mu_);
  peers_.erase(peer_id);
  return absl::OkStatus();
}

bool InProcessAgent::ContainsRegion(const RemoteRegion& region) {
  std::lock_guard lock(mu_);
  for (const auto& [id, local] : regions_) {
    if (local.remote.packed_key == region.packed_key && local.remote.base == region.base &&
        local.size == region.size) {
      return true;
    }
  }
  return false;
}

Status InProcessAgent::PostWrites(const std::string& peer_id, const RemoteRegion& region,
                                  std::span<const WriteOp> ops, TransferTracker& tracker) {
  std::string address;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(peer_id);
    if (it == peers_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("not connected to peer ", peer_id));
    }
    address = it->second;
  }
  std::lock_guard lock(registry_mu);  // keeps the peer alive during the copies
  auto peer = Registry().find(address);
  if (peer == Registry().end()) {
    return TransferError(FailureReason::kPeerFailed, absl::StatusCode::kUnavailable,
                         absl::StrCat("peer ", peer_id, " is gone"));
  }
  if (!peer->second->ContainsRegion(region)) {
    return absl::InvalidArgumentError("remote region is not registered at the peer");
  }
  for (const WriteOp& op : ops) {
    if (op.remote_offset > region.size || op.size > region.size - op.remote_offset) {
      return absl::OutOfRangeError(absl::StrCat("write of ", op.size, " bytes at offset ",
                                                op.remote_offset, " exceeds the remote region of ",
                                                region.size, " bytes"));
    }
  }
  for (const WriteOp& op : ops) {
    tracker.Add(1);
    std::memcpy(reinterpret_cast<char*>(region.base) + op.remote_offset, op.source, op.size);
    tracker.Complete(absl::OkStatus());
  }
  return absl::OkStatus();
}

Status InProcessAgent::PostFlush(const std::string& peer_id, TransferTracker& tracker) {
  std::lock_guard lock(mu_);
  if (!peers_.contains(peer_id)) {
    return absl::FailedPreconditionError(absl::StrCat("not connected to peer ", peer_id));
  }
  tracker.Add(1);
  tracker.Complete(absl::OkStatus());
  return absl::OkStatus();
}

}  // namespace pdspark::transport
