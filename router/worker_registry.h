// Which workers exist, what they are and how loaded they are. Workers register with a fresh
// incarnation id per process start and heartbeat every interval; a worker that misses
// `missed_heartbeats` intervals is unhealthy and gets no new work. A worker that registers again
// at the same address (a restart) replaces its old entry. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pdspark/v1/registry.pb.h"
#include "router/clock.h"

namespace pdspark::router {

enum class WorkerState { kHealthy, kUnhealthy, kDraining };

// The token prefixes a worker's prefix cache holds, as it last reported them
// (v1::WorkerLoad::cached_prefixes): (tokens, prefix hash), longest first.
struct CachedPrefixes {
  std::vector<std::pair<uint32_t, uint64_t>> prefixes;
  // The longest reported prefix of a prompt whose prefix hashes are `hashes` (hashes[p]: the
  // first p tokens, common/base/prefix_hash.h); 0 when none.
  uint32_t LongestPrefix(std::span<const uint64_t> hashes) const;
};

// A copy of one worker's entry, taken under the lock.
struct WorkerSnapshot {
  std::string worker_id;
  std::string incarnation_id;
  v1::WorkerRole role = v1::WORKER_ROLE_UNSPECIFIED;
  std::string address;
  std::string model_id;
  uint32_t tensor_parallel_size = 1;
  std::string config_fingerprint;
  uint32_t max_num_seqs = 0;
  uint32_t max_model_len = 0;
  uint32_t block_size = 0;
  v1::WorkerLoad load;  // without the cached prefixes, which are below
  // Null when the worker reports no prefix cache; shared, so snapshots stay cheap to copy.
  std::shared_ptr<const CachedPrefixes> cached_prefixes;
  // Requests this router sent since the worker's last heartbeat: the load the heartbeat does
  // not show yet, so least_loaded does not pile a burst onto one worker.
  uint32_t assigned_since_heartbeat = 0;
  WorkerState state = WorkerState::kHealthy;
  // Position in registration order; round robin walks this order.
  uint64_t sequence = 0;
};

class WorkerRegistry {
 public:
  WorkerRegistry(const Clock* clock, std::chrono::milliseconds heartbeat_interval,
                 int missed_heartbeats = 3);

  // Returns the worker id. The same incarnation registering again gets the same id (a retried
  // RPC); a new incarnation at the same role+address replaces the old entry.
  std::string Register(const v1::RegisterRequest& request);

  // False when the worker id / incarnation pair is unknown: the worker must register again.
  bool Heartbeat(const std::string& worker_id, const std::string& incarnation_id,
                 const v1::WorkerLoad& load);

  // Stops new work for the worker; false if unknown.
  bool Drain(const std::string& worker_id);

  // Healthy workers of `role`, in registration order.
  std::vector<WorkerSnapshot> Healthy(v1::WorkerRole role) const;
  // Ids of the workers not draining whose last heartbeat is older than `longer_than`.
  std::vector<std::string> Silent(std::chrono::milliseconds longer_than) const;
  // Every known worker with its current state.
  std::vector<WorkerSnapshot> All() const;
  std::optional<WorkerSnapshot> Find(const std::string& worker_id) const;

  // Called by the scheduler when it sends a request to the worker.
  void NoteAssigned(const std::string& worker_id);

  std::chrono::milliseconds heartbeat_interval() const { return heartbeat_interval_; }

 private:
  struct Entry {
    WorkerSnapshot snapshot;
    Clock::TimePoint last_seen;
    bool draining = false;
  };

  WorkerState StateOf(const Entry& entry) const;        // requires mu_
  WorkerSnapshot SnapshotOf(const Entry& entry) const;  // requires mu_
  // Drops entries silent for much longer than the expiry, so the map stays bounded.
  void PruneLocked();

  const Clock* clock_;
  const std::chrono::milliseconds heartbeat_interval_;
  const int missed_heartbeats_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> workers_;  // by worker id
  uint64_t next_sequence_ = 1;
};

std::string_view WorkerStateName(WorkerState state);
std::string_view WorkerRoleName(v1::WorkerRole role);

}  // namespace pdspark::router
