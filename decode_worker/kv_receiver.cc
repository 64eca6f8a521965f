#include "decode_worker/kv_receiver.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/transport/staged_state.h"

namespace pdspark::decode {
namespace {

constexpr uint64_t kAlignment = 4096;

uint64_t AlignUp(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

StatusOr<std::unique_ptr<KvReceiver>> KvReceiver::Create(transport::TransferAgent* agent,
                                                         uint64_t arena_bytes,
                                                         std::string incarnation_id,
                                                         std::string config_fingerprint,
                                                         SizeBound bound,
                                                         worker::KvTransferMetrics* metrics) {
  std::unique_ptr<KvReceiver> receiver(new KvReceiver);
  receiver->agent_ = agent;
  receiver->arena_bytes_ = AlignUp(arena_bytes);
  receiver->arena_.reset(static_cast<char*>(std::aligned_alloc(kAlignment, receiver->arena_bytes_)));
  if (!receiver->arena_) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a KV staging arena of ",
                                                     receiver->arena_bytes_, " bytes"));
  }
  ASSIGN_OR_RETURN(receiver->region_,
                   agent->RegisterMemory(receiver->arena_.get(), receiver->arena_bytes_));
  receiver->incarnation_id_ = std::move(incarnation_id);
  receiver->fingerprint_ = std::move(config_fingerprint);
  receiver->bound_ = std::move(bound);
  receiver->metrics_ = metrics;
  LOG_INFO("kv staging arena registered bytes={} transport={}", receiver->arena_bytes_,
           agent->TransportName());
  return receiver;
}

KvReceiver::~KvReceiver() {
  if (agent_ && region_.id) agent_->DeregisterMemory(region_.id).IgnoreError();
}

void KvReceiver::ExpireLocked(Clock::time_point now) {
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    LOG_WARN("reservation lease expired reservation={} bytes={}", it->first, it->second.size);
    used_.erase(it->second.offset);
    it = reservations_.erase(it);
    ++expired_total_;
    metrics_->LeaseExpired();
    metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  }
}

StatusOr<uint64_t> KvReceiver::AllocateLocked(uint64_t size) {
  uint64_t candidate = 0;
  for (const auto& [offset, used] : used_) {
    if (offset - candidate >= size) break;
    candidate = offset + used;
  }
  if (candidate + size > arena_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("KV staging arena full: need ", size,
                                                     " bytes, arena holds ", arena_bytes_));
  }
  used_[candidate] = size;
  return candidate;
}

StatusOr<v1::ReserveResponse> KvReceiver::Reserve(const v1::ReserveRequest& request) {
  const uint64_t size =
      AlignUp(sizeof(transport::StagedHeader) + bound_(request.prompt_tokens()));
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  ExpireLocked(now);
  ASSIGN_OR_RETURN(const uint64_t offset, AllocateLocked(size));
  // A stale header from an earlier request must not look like a delivery.
  std::memset(arena_.get() + offset, 0, sizeof(transport::StagedHeader));
  const std::string id = absl::StrCat("rsv-", next_id_++);
  reservations_[id] = {offset, size, now + std::chrono::milliseconds(request.lease_ms() > 0
                                                                         ? request.lease_ms()
                                                                         : 30000)};
  v1::TransferDescriptor descriptor;
  descriptor.set_transport(agent_->TransportName());
  descriptor.set_agent_address(agent_->LocalAddress());
  descriptor.set_incarnation_id(incarnation_id_);
  descriptor.set_config_fingerprint(fingerprint_);
  descriptor.set_region(region_.remote.Serialize());
  descriptor.set_offset(offset);
  descriptor.set_capacity(size);
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  v1::ReserveResponse response;
  response.set_reservation_id(id);
  response.set_transfer_descriptor(descriptor.SerializeAsString());
  return response;
}

bool KvReceiver::Release(const std::string& reservation_id) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return false;
  used_.erase(it->second.offset);
  reservations_.erase(it);
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  return true;
}

StatusOr<std::string> KvReceiver::Take(const std::string& reservation_id) {
  std::lock_guard lock(mu_);
  ExpireLocked(Clock::now());
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) {
    return absl::NotFoundError(
        absl::StrCat("reservation ", reservation_id, " is unknown or its lease expired"));
  }
  const Reservation reservation = it->second;
  used_.erase(reservation.offset);
  reservations_.erase(it);
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  auto state = transport::ReadStaged(arena_.get() + reservation.offset, reservation.size);
  if (state.ok()) {
    metrics_->Received(state->size());
  } else {
    metrics_->Failed(state.status());
  }
  return state;
}

ReservationStats KvReceiver::Stats() {
  std::lock_guard lock(mu_);
  ExpireLocked(Clock::now());
  ReservationStats stats;
  stats.active = static_cast<int64_t>(reservations_.size());
  stats.expired_total = expired_total_;
  for (const auto& [id, r] : reservations_) stats.bytes_reserved += r.size;
  return stats;
}

}  // namespace pdspark::decode
