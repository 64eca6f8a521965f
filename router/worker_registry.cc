#include "router/worker_registry.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace pdspark::router {

WorkerRegistry::WorkerRegistry(const Clock* clock, std::chrono::milliseconds heartbeat_interval,
                               int missed_heartbeats)
    : clock_(clock),
      heartbeat_interval_(heartbeat_interval),
      missed_heartbeats_(missed_heartbeats) {}

std::string WorkerRegistry::Register(const v1::RegisterRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::TimePoint now = clock_->Now();
  for (auto it = workers_.begin(); it != workers_.end();) {
    const WorkerSnapshot& s = it->second.snapshot;
    if (s.incarnation_id == request.incarnation_id() && s.address == request.address()) {
      it->second.last_seen = now;  // a retried Register of the same process
      return it->first;
    }
    if (s.role == request.role() && s.address == request.address()) {
      LOG_INFO("worker replaced worker={} address={} old_incarnation={} new_incarnation={}",
               it->first, s.address, s.incarnation_id, request.incarnation_id());
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  PruneLocked();
  const uint64_t sequence = next_sequence_++;
  Entry entry;
  WorkerSnapshot& s = entry.snapshot;
  s.worker_id = absl::StrCat(std::string(WorkerRoleName(request.role())), "-", sequence);
  s.incarnation_id = request.incarnation_id();
  s.role = request.role();
  s.address = request.address();
  s.model_id = request.model_id();
  s.tensor_parallel_size = std::max<uint32_t>(1, request.tensor_parallel_size());
  s.config_fingerprint = request.config_fingerprint();
  s.max_num_seqs = request.max_num_seqs();
  s.max_model_len = request.max_model_len();
  s.block_size = request.block_size();
  s.sequence = sequence;
  entry.last_seen = now;
  std::string id = s.worker_id;
  LOG_INFO("worker registered worker={} role={} address={} incarnation={} model={} tp={}", id,
           WorkerRoleName(s.role), s.address, s.incarnation_id, s.model_id, s.tensor_parallel_size);
  workers_.emplace(id, std::move(entry));
  return id;
}

uint32_t CachedPrefixes::LongestPrefix(std::span<const uint64_t> hashes) const {
  for (const auto& [tokens, hash] : prefixes) {
    if (tokens < hashes.size() && hashes[tokens] == hash) return tokens;
  }
  return 0;
}

namespace {

std::shared_ptr<const CachedPrefixes> ReportedPrefixes(const v1::WorkerLoad& load) {
  if (load.cache_version() == 0) return nullptr;
  auto cached = std::make_shared<CachedPrefixes>();
  const int n = std::min(load.cached_prefixes_size(), load.cached_prefix_lengths_size());
  for (int i = 0; i < n; ++i) {
    cached->prefixes.emplace_back(load.cached_prefix_lengths(i), load.cached_prefixes(i));
  }
  std::sort(cached->prefixes.begin(), cached->prefixes.end(), std::greater<>());
  return cached;
}

}  // namespace

bool WorkerRegistry::Heartbeat(const std::string& worker_id, const std::string& incarnation_id,
                               const v1::WorkerLoad& load) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.snapshot.incarnation_id != incarnation_id) return false;
  Entry& e = it->second;
  if (StateOf(e) == WorkerState::kUnhealthy) {
    LOG_INFO("worker healthy again worker={}", worker_id);
  }
  e.last_seen = clock_->Now();
  e.snapshot.load = load;
  e.snapshot.load.clear_cached_prefixes();
  e.snapshot.load.clear_cached_prefix_lengths();
  if (!load.cached_prefixes_unchanged()) e.snapshot.cached_prefixes = ReportedPrefixes(load);
  e.snapshot.assigned_since_heartbeat = 0;
  return true;
}

bool WorkerRegistry::Drain(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return false;
  it->second.draining = true;
  LOG_INFO("worker draining worker={}", worker_id);
  return true;
}

std::vector<WorkerSnapshot> WorkerRegistry::Healthy(v1::WorkerRole role) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& [id, e] : workers_) {
    if (e.snapshot.role == role && StateOf(e) == WorkerState::kHealthy) {
      out.push_back(SnapshotOf(e));
    }
  }
  std::sort(out.begin(), out.end(), [](const WorkerSnapshot& a, const WorkerSnapshot& b) {
    return a.sequence < b.sequence;
  });
  return out;
}

std::vector<std::string> WorkerRegistry::Silent(std::chrono::milliseconds longer_than) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::TimePoint now = clock_->Now();
  std::vector<std::string> out;
  for (const auto& [id, e] : workers_) {
    if (!e.draining && now - e.last_seen > longer_than) out.push_back(id);
  }
  return out;
}

std::vector<WorkerSnapshot> WorkerRegistry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& [id, e] : workers_) out.push_back(SnapshotOf(e));
  return out;
}

std::optional<WorkerSnapshot> WorkerRegistry::Find(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return std::nullopt;
  return SnapshotOf(it->second);
}

void WorkerRegistry::NoteAssigned(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) ++it->second.snapshot.assigned_since_heartbeat;
}

WorkerState WorkerRegistry::StateOf(const Entry& entry) const {
  if (entry.draining) return WorkerState::kDraining;
  if (clock_->Now() - entry.last_seen > heartbeat_interval_ * missed_heartbeats_) {
    return WorkerState::kUnhealthy;
  }
  return WorkerState::kHealthy;
}

WorkerSnapshot WorkerRegistry::SnapshotOf(const Entry& entry) const {
  WorkerSnapshot s = entry.snapshot;
  s.state = StateOf(entry);
  return s;
}

void WorkerRegistry::PruneLocked() {
  const auto horizon = heartbeat_interval_ * missed_heartbeats_ * 100;
  const Clock::TimePoint now = clock_->Now();
  std::erase_if(workers_, [&](const auto& kv) { return now - kv.second.last_seen > horizon; });
}

std::string_view WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kHealthy:
      return "healthy";
    case WorkerState::kUnhealthy:
      return "unhealthy";
    case WorkerState::kDraining:
      return "draining";
  }
  return "unknown";
}

std::string_view WorkerRoleName(v1::WorkerRole role) {
  switch (role) {
    case v1::WORKER_ROLE_PREFILL:
      return "prefill";
    case v1::WORKER_ROLE_DECODE:
      return "decode";
    default:
      return "worker";
  }
}

}  // namespace pdspark::router
