#include "decode_worker/kv_receiver.h"

#include <algorithm>
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

// Where each group's transfer starts when the prompt's first tokens are already in `cached`
// (a prefix of it): at the page boundary at or below the rows cached, when it holds every row
// the group keeps from its first_row on; else at first_row (the group travels whole). The page
// holding the first uncached row travels whole, so a cached page is never written. Empty when
// the cache spares no row.
std::vector<int64_t> ShipFromCachedRows(const engine::StagingLayout& layout,
                                        const engine::SequenceState& cached) {
  std::vector<int64_t> ship_from;
  bool spared = false;
  for (const engine::StagedGroup& g : layout.groups) {
    const engine::PagedRows& rows = cached.GroupAt(g.layer, g.group);
    const int64_t boundary = std::min(rows.size(), g.end_row) / g.rows_per_page * g.rows_per_page;
    const bool holds_kept_rows = rows.first_row() <= g.first_row;
    ship_from.push_back(holds_kept_rows && boundary > g.first_row ? boundary : g.first_row);
    spared = spared || ship_from.back() > g.first_row;
  }
  return spared ? ship_from : std::vector<int64_t>{};
}

}  // namespace

StatusOr<std::unique_ptr<KvReceiver>> KvReceiver::Create(transport::TransferAgent* agent,
                                                         ReceiverOptions options,
                                                         worker::KvTransferMetrics* metrics) {
  if (options.cache_layout == nullptr || options.block_rows <= 0 || !options.new_sequence ||
      options.page_bytes <= 0) {
    return absl::InvalidArgumentError(
        "KV receiver needs the cache layout, block rows and the engine's registered KV pool");
  }
  std::unique_ptr<KvReceiver> receiver(new KvReceiver);
  receiver->agent_ = agent;
  ASSIGN_OR_RETURN(receiver->arena_, transport::RegisteredArena::Create(agent, options.arena_bytes,
                                                                        "KV staging arena"));
  receiver->link_digest_ = transport::LinkDigest(options.link);
  receiver->options_ = std::move(options);
  receiver->metrics_ = metrics;
  receiver->nonces_.seed(std::random_device{}());
  receiver->reaper_ = std::thread([r = receiver.get()] {
    std::unique_lock lock(r->mu_);
    while (!r->stopping_) {
      r->ExpireLocked(Clock::now());
      r->reaper_cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
  });
  return receiver;
}

KvReceiver::~KvReceiver() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

void KvReceiver::QuarantineLocked(Reservation reservation, Clock::time_point now) {
  quarantined_.push_back({now + options_.late_write_grace, false, std::move(reservation)});
}

void KvReceiver::FenceLocked() {
  const Status fenced = agent_->Fence();
  if (!fenced.ok()) {
    // The pages stay quarantined; the reaper tries again.
    LOG_ERROR("kv fence failed, quarantined pages held error={}", fenced.ToString());
    return;
  }
  for (Quarantined& q : quarantined_) q.fenced = true;
  ++fences_total_;
  metrics_->Fenced();
  LOG_INFO("kv fence: connections from prefill workers closed quarantined={}", quarantined_.size());
}

void KvReceiver::ExpireLocked(Clock::time_point now) {
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    LOG_WARN("reservation lease expired reservation={} tokens={}", it->first,
             it->second.layout.tokens);
    QuarantineLocked(std::move(it->second), now);
    it = reservations_.erase(it);
    ++expired_total_;
    metrics_->LeaseExpired();
  }
  // With no transfer under way a fence costs nothing.
  const bool unfenced = std::any_of(quarantined_.begin(), quarantined_.end(),
                                    [](const Quarantined& q) { return !q.fenced; });
  if (unfenced && reservations_.empty()) FenceLocked();
  // Fenced and past their grace, quarantined reservations give their pages, lease and record
  // slice back.
  std::erase_if(quarantined_, [&](const Quarantined& q) {
    if (!q.fenced || q.grace_end > now) return false;
    arena_->Free(q.reservation.offset);
    return true;
  });
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
}

StatusOr<serving::CacheLease> KvReceiver::LeaseLocked(const v1::ReserveRequest& request) {
  if (!options_.lease_cache) return serving::CacheLease{};
  StatusOr<serving::CacheLease> lease = options_.lease_cache(request);
  const auto now = Clock::now();
  const bool reclaimable =
      std::any_of(quarantined_.begin(), quarantined_.end(),
                  [&](const Quarantined& q) { return !q.fenced && q.grace_end <= now; });
  if (lease.ok() || !absl::IsResourceExhausted(lease.status()) || !reclaimable) return lease;
  // Quarantined leases hold the pool: fence now, though transfers under way fail (the router
  // retries them), rather than refuse.
  FenceLocked();
  ExpireLocked(now);
  return options_.lease_cache(request);
}

StatusOr<v1::ReserveResponse> KvReceiver::Reserve(const v1::ReserveRequest& request) {
  if (request.prompt_token_ids_size() > 0 &&
      request.prompt_token_ids_size() != static_cast<int>(request.prompt_tokens())) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_token_ids holds ", request.prompt_token_ids_size(),
                     " tokens, prompt_tokens says ", request.prompt_tokens()));
  }
  Reservation reservation;
  reservation.layout =
      engine::StagingLayout::Compute(*options_.cache_layout, request.prompt_tokens(),
                                     options_.block_rows, options_.link.drafter_state_bytes);
  const auto lease = std::chrono::milliseconds(request.lease_ms() > 0 ? request.lease_ms() : 30000);
  // The longest prefix of the prompt held here, looked up before the lock (it hashes the prompt).
  serving::PrefixHit cached;
  if (options_.cached_prefix && request.prompt_token_ids_size() > 0) {
    const std::vector<int32_t> prompt(request.prompt_token_ids().begin(),
                                      request.prompt_token_ids().end());
    cached = options_.cached_prefix(prompt);
  }
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  ExpireLocked(now);
  const std::string address = agent_->LocalAddress();
  if (address.empty()) {
    return absl::UnavailableError(
        "the KV transport has no address (its network device is down); prefill here instead");
  }
  ASSIGN_OR_RETURN(reservation.lease, LeaseLocked(request));
  RETURN_IF_ERROR(PrepareSequence(std::move(cached), reservation));
  ASSIGN_OR_RETURN(reservation.offset, arena_->Allocate(reservation.layout.record_bytes()));
  // A stale record from an earlier request must not look like a delivery.
  std::memset(arena_->data() + reservation.offset, 0, transport::kRecordHeaderBytes);
  reservation.expires = now + lease;
  reservation.nonce = nonces_();
  auto descriptor = Describe(reservation, address, request.prompt_tokens(), lease);
  if (!descriptor.ok()) {
    arena_->Free(reservation.offset);
    return descriptor.status();
  }
  const std::string id = absl::StrCat("rsv-", next_id_++);
  reservations_[id] = std::move(reservation);
  metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  v1::ReserveResponse response;
  response.set_reservation_id(id);
  response.set_transfer_descriptor(descriptor->SerializeAsString());
  return response;
}

Status KvReceiver::PrepareSequence(serving::PrefixHit hit, Reservation& reservation) {
  engine::StagingLayout& layout = reservation.layout;
  // What a colocated prefill would have left: rows [first_row, end_row) of every group.
  std::vector<engine::SequenceState::GroupRows> rows;
  for (const engine::StagedGroup& g : layout.groups) rows.push_back({g.first_row, g.end_row});
  const std::vector<int64_t> ship_from =
      hit.tokens > 0 ? ShipFromCachedRows(layout, *hit.state) : std::vector<int64_t>{};
  if (ship_from.empty()) {
    reservation.sequence = options_.new_sequence();
    return reservation.sequence->RestoreRows(layout.tokens, rows);
  }
  reservation.sequence = std::move(hit.state);
  reservation.cached_tokens = hit.tokens;
  RETURN_IF_ERROR(reservation.sequence->ExtendForTransfer(layout.tokens, rows, ship_from));
  return layout.ShipFrom(ship_from);
}

StatusOr<v1::TransferDescriptor> KvReceiver::Describe(const Reservation& reservation,
                                                      const std::string& address,
                                                      uint32_t prompt_tokens,
                                                      std::chrono::milliseconds lease) const {
  v1::TransferDescriptor descriptor;
  descriptor.set_transport(agent_->TransportName());
  descriptor.set_agent_address(address);
  descriptor.set_incarnation_id(options_.incarnation_id);
  descriptor.set_config_fingerprint(options_.link.config_fingerprint);
  descriptor.set_cache_manifest(options_.link.cache_manifest);
  descriptor.set_tensor_parallel_size(static_cast<uint32_t>(options_.link.tensor_parallel_size));
  descriptor.set_region(arena_->region().remote.Serialize());
  descriptor.set_offset(reservation.offset);
  descriptor.set_capacity(reservation.layout.record_bytes());
  descriptor.set_prompt_tokens(prompt_tokens);
  descriptor.set_block_rows(static_cast<uint32_t>(options_.block_rows));
  descriptor.set_drafter_state_bytes(options_.link.drafter_state_bytes);
  descriptor.set_nonce(reservation.nonce);
  descriptor.set_lease_deadline_unix_us(
      std::chrono::duration_cast<std::chrono::microseconds>(
          (std::chrono::system_clock::now() + lease).time_since_epoch())
          .count());
  descriptor.set_pool_region(options_.pool_region.Serialize());
  descriptor.set_page_bytes(static_cast<uint64_t>(options_.page_bytes));
  for (const engine::StagedGroup& g : reservation.layout.groups) {
    // The pages of the rows the transfer fills; those of cached rows before them stay out.
    const engine::PagedRows& rows = reservation.sequence->GroupAt(g.layer, g.group);
    const auto& table = rows.block_table();
    const int64_t skip = g.first_row / g.rows_per_page - rows.first_row() / g.rows_per_page;
    if (skip < 0 || skip + g.PagesSpanned() > static_cast<int64_t>(table.size())) {
      return absl::InternalError(absl::StrCat(
          "layer ", g.layer, " group ", g.group, ": ", table.size(), " pages from row ",
          rows.first_row(), " do not hold rows [", g.first_row, ", ", g.end_row, ")"));
    }
    descriptor.add_page_tables()->mutable_pages()->Add(table.begin() + skip,
                                                       table.begin() + skip + g.PagesSpanned());
    if (reservation.cached_tokens > 0) descriptor.add_ship_from_rows(g.first_row);
  }
  descriptor.set_cached_tokens(static_cast<uint32_t>(reservation.cached_tokens));
  return descriptor;
}

bool KvReceiver::Release(const std::string& reservation_id, bool transfer_completed) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return false;
  if (transfer_completed) {
    arena_->Free(it->second.offset);  // the pages and the lease go with the reservation
  } else {
    QuarantineLocked(std::move(it->second), Clock::now());
  }
  reservations_.erase(it);
  ExpireLocked(Clock::now());
  return true;
}

StatusOr<std::shared_ptr<serving::PrefilledState>> KvReceiver::Take(
    const std::string& reservation_id, std::unique_ptr<dspark::DrafterState> drafter) {
  Reservation reservation;
  {
    std::lock_guard lock(mu_);
    ExpireLocked(Clock::now());
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end()) {
      return absl::NotFoundError(
          absl::StrCat("reservation ", reservation_id, " is unknown or its lease expired"));
    }
    // Out of the table (no expiry, no release) while it is read.
    reservation = std::move(it->second);
    reservations_.erase(it);
    metrics_->SetActiveReservations(static_cast<int64_t>(reservations_.size()));
  }
  uint64_t bytes = 0;
  int64_t prefill_end_ns = 0;
  const Status verified = Verify(reservation, drafter.get(), &bytes, &prefill_end_ns);
  if (!verified.ok()) {
    metrics_->Failed(verified);
    LOG_WARN("kv delivery rejected reservation={} error={}", reservation_id, verified.ToString());
    std::lock_guard lock(mu_);
    QuarantineLocked(std::move(reservation), Clock::now());
    ExpireLocked(Clock::now());
    return absl::Status(verified.code(),
                        absl::StrCat("reservation ", reservation_id, ": ", verified.message()));
  }
  arena_->Free(reservation.offset);
  metrics_->ReusedPrefix(reservation.cached_tokens);
  metrics_->Received(bytes, static_cast<double>(UnixNanos() - prefill_end_ns) * 1e-9);
  // The request runs on the sequence the rows landed in, and on the lease its reservation took.
  auto prefilled = std::make_shared<serving::PrefilledState>();
  prefilled->sequence = std::move(reservation.sequence);
  if (drafter) prefilled->drafter = std::move(drafter);
  prefilled->lease = std::move(reservation.lease);
  return prefilled;
}

Status KvReceiver::Verify(const Reservation& reservation, dspark::DrafterState* drafter,
                          uint64_t* bytes, int64_t* prefill_end_ns) const {
  const engine::StagingLayout& layout = reservation.layout;
  ASSIGN_OR_RETURN(const auto record,
                   transport::CompletionRecord::Parse(arena_->data() + reservation.offset,
                                                      layout.record_capacity, reservation.nonce));
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
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    const engine::StagedGroup& staged = layout.groups[i];
    const transport::SegmentReport& segment = record.segments[i];
    const auto& spec = options_.cache_layout->layers[staged.layer].groups[staged.group];
    if (segment.first_row != static_cast<uint64_t>(staged.first_row) ||
        segment.rows != static_cast<uint64_t>(staged.end_row - staged.first_row)) {
      return absl::DataLossError(absl::StrCat(
          "layer ", staged.layer, " ", spec.name, ": rows [", segment.first_row, ", +",
          segment.rows, ") are not the reserved [", staged.first_row, ", ", staged.end_row, ")"));
    }
    // The rows are where the transfer wrote them (the pages, or a device pool's host mirror of
    // them): check them there, a page's rows at a time.
    const engine::PagedRows& rows = reservation.sequence->GroupAt(staged.layer, staged.group);
    transport::StreamChecksum checksum;
    rows.ForEachPageRun(staged.first_row, staged.end_row, [&](int64_t, const char* at, int64_t n) {
      checksum.Update(rows.pool().TransferAddress(at), static_cast<size_t>(n * staged.row_bytes));
    });
    if (checksum.Digest() != segment.checksum) {
      return absl::DataLossError(absl::StrCat("layer ", staged.layer, " ", spec.name,
                                              " failed its checksum (incomplete or torn "
                                              "transfer)"));
    }
    *bytes += segment.rows * staged.row_bytes;
  }
  // All verified: a device pool's rows go on from its host mirror into the pages.
  for (const engine::StagedGroup& staged : layout.groups) {
    const engine::PagedRows& rows = reservation.sequence->GroupAt(staged.layer, staged.group);
    rows.ForEachPageRun(staged.first_row, staged.end_row, [&](int64_t, char* at, int64_t n) {
      rows.pool().LandTransfer(at, static_cast<size_t>(n * staged.row_bytes));
    });
  }
  // What the prefill worker counts as sent: the rows and the completion record (drafter ring,
  // segment reports) it wrote.
  *bytes += record.Serialize().size();
  if (drafter) {
    if (record.drafter_state.empty()) {
      return absl::FailedPreconditionError(
          "the prefill worker shipped no DSpark drafter context, which this worker needs");
    }
    RETURN_IF_ERROR(drafter->Restore(record.drafter_state));
    // The ring was copied out of the record, then into its pages.
    metrics_->Copied(2 * record.drafter_state.size());
  }
  *prefill_end_ns = record.prefill_end_unix_ns;
  return absl::OkStatus();
}

ReservationStats KvReceiver::Stats() {
  std::lock_guard lock(mu_);
  ExpireLocked(Clock::now());
  ReservationStats stats;
  stats.active = static_cast<int64_t>(reservations_.size());
  stats.expired_total = expired_total_;
  for (const auto& [id, r] : reservations_) stats.bytes_reserved += r.sequence->MemoryBytes();
  stats.quarantined = static_cast<int64_t>(quarantined_.size());
  stats.fences_total = fences_total_;
  return stats;
}

}  // namespace pdspark::decode
