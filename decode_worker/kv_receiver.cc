#include "decode_worker/kv_receiver.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/transport/staged_state.h"

namespace pdspark::decode {
namespace {

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusOr<std::unique_ptr<KvReceiver>> KvReceiver::Create(transport::TransferAgent* agent,
                                                         ReceiverOptions options,
                                                         worker::KvTransferMetrics* metrics) {
  if (options.cache_layout == nullptr || options.block_rows <= 0) {
    return absl::InvalidArgumentError("KV receiver needs the cache layout and block rows");
  }
  std::unique_ptr<KvReceiver> receiver(new KvReceiver);
  receiver->agent_ = agent;
  ASSIGN_OR_RETURN(receiver->arena_, transport::RegisteredArena::Create(agent, options.arena_bytes,
                                                                        "KV staging arena"));
  receiver->link_digest_ = transport::LinkDigest(options.link);
  receiver->options_ = std::move(options);
  receiver->metrics_ = metrics;
  receiver->nonces_.seed(std::random_device{}());
  return receiver;
}

void KvReceiver::ExpireLocked(Clock::time_point now) {
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    LOG_WARN("reservation lease expired reservation={} bytes={}", it->first,
             it->second.layout.total_bytes);
    arena_->Free(it->second.offset);
    it = reservations_.erase(it);
    ++expired_total_;
    metrics_->LeaseExpired();
    metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  }
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
}

StatusOr<v1::ReserveResponse> KvReceiver::Reserve(const v1::ReserveRequest& request) {
  Reservation reservation;
  reservation.layout =
      engine::StagingLayout::Compute(*options_.cache_layout, request.prompt_tokens(),
                                     options_.block_rows, options_.link.drafter_state_bytes);
  const auto lease = std::chrono::milliseconds(request.lease_ms() > 0 ? request.lease_ms() : 30000);
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  ExpireLocked(now);
  if (options_.lease_cache) {
    ASSIGN_OR_RETURN(reservation.lease, options_.lease_cache(request));
  }
  ASSIGN_OR_RETURN(reservation.offset, arena_->Allocate(reservation.layout.total_bytes));
  // A stale record from an earlier request must not look like a delivery.
  std::memset(arena_->data() + reservation.offset, 0, transport::kRecordHeaderBytes);
  reservation.expires = now + lease;
  reservation.nonce = nonces_();
  v1::TransferDescriptor descriptor;
  descriptor.set_transport(agent_->TransportName());
  descriptor.set_agent_address(agent_->LocalAddress());
  descriptor.set_incarnation_id(options_.incarnation_id);
  descriptor.set_config_fingerprint(options_.link.config_fingerprint);
  descriptor.set_cache_manifest(options_.link.cache_manifest);
  descriptor.set_tensor_parallel_size(static_cast<uint32_t>(options_.link.tensor_parallel_size));
  descriptor.set_region(arena_->region().remote.Serialize());
  descriptor.set_offset(reservation.offset);
  descriptor.set_capacity(reservation.layout.total_bytes);
  descriptor.set_prompt_tokens(request.prompt_tokens());
  descriptor.set_block_rows(static_cast<uint32_t>(options_.block_rows));
  descriptor.set_drafter_state_bytes(options_.link.drafter_state_bytes);
  descriptor.set_nonce(reservation.nonce);
  descriptor.set_lease_deadline_unix_us(
      std::chrono::duration_cast<std::chrono::microseconds>(
          (std::chrono::system_clock::now() + lease).time_since_epoch())
          .count());
  const std::string id = absl::StrCat("rsv-", next_id_++);
  reservations_[id] = std::move(reservation);
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
  arena_->Free(it->second.offset);
  reservations_.erase(it);
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  return true;
}

StatusOr<std::shared_ptr<serving::PrefilledState>> KvReceiver::Take(
    const std::string& reservation_id, std::unique_ptr<engine::SequenceState> sequence,
    std::unique_ptr<dspark::DrafterState> drafter) {
  Reservation reservation;
  {
    std::lock_guard lock(mu_);
    ExpireLocked(Clock::now());
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end()) {
      return absl::NotFoundError(
          absl::StrCat("reservation ", reservation_id, " is unknown or its lease expired"));
    }
    // Out of the table (no expiry, no release) but still allocated while it is read.
    reservation = std::move(it->second);
    reservations_.erase(it);
    metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  }
  uint64_t bytes = 0;
  int64_t prefill_end_ns = 0;
  auto restored =
      Restore(reservation, std::move(sequence), std::move(drafter), &bytes, &prefill_end_ns);
  arena_->Free(reservation.offset);
  if (!restored.ok()) {
    metrics_->Failed(restored.status());
    LOG_WARN("kv delivery rejected reservation={} error={}", reservation_id,
             restored.status().ToString());
    return absl::Status(restored.status().code(), absl::StrCat("reservation ", reservation_id, ": ",
                                                               restored.status().message()));
  }
  metrics_->Received(bytes, static_cast<double>(UnixNanos() - prefill_end_ns) * 1e-9);
  // The request runs on the lease its reservation took.
  (*restored)->lease = std::move(reservation.lease);
  return restored;
}

StatusOr<std::shared_ptr<serving::PrefilledState>> KvReceiver::Restore(
    const Reservation& reservation, std::unique_ptr<engine::SequenceState> sequence,
    std::unique_ptr<dspark::DrafterState> drafter, uint64_t* bytes, int64_t* prefill_end_ns) {
  const engine::StagingLayout& layout = reservation.layout;
  const char* base = arena_->data() + reservation.offset;
  ASSIGN_OR_RETURN(const auto record, transport::CompletionRecord::Parse(
                                          base, layout.record_capacity, reservation.nonce));
  if (record.link_digest != link_digest_) {
    return absl::DataLossError(
        "the state was written by a prefill worker with another model or cache manifest");
  }
  if (record.num_tokens != static_cast<uint64_t>(layout.tokens) ||
      record.segments.size() != layout.groups.size()) {
    return absl::DataLossError(absl::StrCat("delivered ", record.num_tokens, " tokens in ",
                                            record.segments.size(), " segments, expected ",
                                            layout.tokens, " in ", layout.groups.size()));
  }
  std::vector<engine::SequenceState::GroupRows> rows;
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    const engine::StagedGroup& staged = layout.groups[i];
    const transport::SegmentReport& segment = record.segments[i];
    const auto& spec = options_.cache_layout->layers[staged.layer].groups[staged.group];
    if (segment.first_row != static_cast<uint64_t>(staged.first_row) ||
        segment.rows > static_cast<uint64_t>(staged.capacity_rows)) {
      return absl::DataLossError(absl::StrCat("layer ", staged.layer, " ", spec.name, ": rows [",
                                              segment.first_row, ", +", segment.rows,
                                              ") do not fit the reservation"));
    }
    const char* data = base + staged.offset;
    const uint64_t size = segment.rows * staged.row_bytes;
    if (transport::Checksum(std::string_view(data, size)) != segment.checksum) {
      return absl::DataLossError(absl::StrCat("layer ", staged.layer, " ", spec.name,
                                              " failed its checksum (incomplete or torn "
                                              "transfer)"));
    }
    *bytes += size;
    rows.push_back({staged.first_row, staged.first_row + static_cast<int64_t>(segment.rows), data});
  }
  RETURN_IF_ERROR(sequence->RestoreRows(static_cast<int64_t>(record.num_tokens), rows));
  // What the prefill worker counts as sent: the rows and the completion record (drafter ring,
  // segment reports) it wrote into the reservation.
  *bytes += record.Serialize().size();
  auto prefilled = std::make_shared<serving::PrefilledState>();
  prefilled->sequence = std::move(sequence);
  if (drafter) {
    if (record.drafter_state.empty()) {
      return absl::FailedPreconditionError(
          "the prefill worker shipped no DSpark drafter context, which this worker needs");
    }
    RETURN_IF_ERROR(drafter->Restore(record.drafter_state));
    prefilled->drafter = std::move(drafter);
  }
  *prefill_end_ns = record.prefill_end_unix_ns;
  return prefilled;
}

ReservationStats KvReceiver::Stats() {
  std::lock_guard lock(mu_);
  ExpireLocked(Clock::now());
  ReservationStats stats;
  stats.active = static_cast<int64_t>(reservations_.size());
  stats.expired_total = expired_total_;
  for (const auto& [id, r] : reservations_) stats.bytes_reserved += r.layout.total_bytes;
  return stats;
}

}  // namespace pdspark::decode
