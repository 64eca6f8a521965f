// Chooses the workers for each request: a decode worker always, and a prefill worker when
// there is one (otherwise the decode worker prefills locally, the colocated path). Prefill and
// decode have separate policies because their loads differ (prefill is compute-bound and
// bursty; decode is bounded by running sequences and cache).
#pragma once

#include <atomic>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "router/prefix_index.h"
#include "router/worker_registry.h"

namespace pdspark::router {

// round_robin: rotate. least_loaded: fewest running + queued + just sent. kv_aware: fewest
// uncached prompt tokens plus a per-request load cost, where "cached" is what the router sent
// the worker before (PrefixIndex); when loads are far apart it falls back to least_loaded so a
// popular prefix cannot pile everything onto one worker.
enum class SchedulingPolicy { kRoundRobin, kLeastLoaded, kKvAware };

struct KvAwareOptions {
  // One request in flight costs as much as this many uncached prompt tokens.
  uint32_t load_cost_tokens = 128;
  // Imbalance guard: least_loaded when max - min load > abs and max > ratio * min.
  uint32_t imbalance_abs = 32;
  double imbalance_ratio = 1.5;
};

StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name);
std::string_view SchedulingPolicyName(SchedulingPolicy policy);

struct Assignment {
  std::optional<WorkerSnapshot> prefill;  // empty: colocated
  WorkerSnapshot decode;
};

class Scheduler {
 public:
  Scheduler(WorkerRegistry* registry, SchedulingPolicy prefill_policy,
            SchedulingPolicy decode_policy, KvAwareOptions kv = {});

  // Unavailable when no healthy decode worker exists. Notes the assignment in the registry
  // (and, for kv_aware, the prompt in the prefix index).
  StatusOr<Assignment> Pick(const std::vector<uint32_t>& prompt = {});

  // A healthy worker of `role` to take over a request (retry, migration), skipping the ones
  // that already failed it; empty when none is left.
  std::optional<WorkerSnapshot> PickReplacement(v1::WorkerRole role,
                                                const std::vector<uint32_t>& prompt,
                                                const std::vector<std::string>& exclude);

  const WorkerRegistry& registry() const { return *registry_; }

  const PrefixIndex& prefix_index() const { return index_; }

  SchedulingPolicy decode_policy() const { return decode_policy_; }
  SchedulingPolicy prefill_policy() const { return prefill_policy_; }

 private:
  std::optional<WorkerSnapshot> Choose(std::vector<WorkerSnapshot> candidates,
                                       SchedulingPolicy policy, std::atomic<uint64_t>* cursor,
                                       const std::vector<uint32_t>& prompt);
  // Index of the best candidate under `cost` (lower wins; ties: more free cache, then rotation).
  template <typename Cost>
  size_t ArgMin(const std::vector<WorkerSnapshot>& candidates, uint64_t turn, Cost cost) const;
  bool Imbalanced(const std::vector<WorkerSnapshot>& candidates) const;
  // Prompt tokens the worker is believed to have cached (kv_aware).
  uint32_t CachedTokens(const WorkerSnapshot& worker, const std::vector<uint32_t>& prompt,
                        std::span<const uint64_t> prefix_hashes);

  WorkerRegistry* registry_;
  SchedulingPolicy prefill_policy_;
  SchedulingPolicy decode_policy_;
  KvAwareOptions kv_;
  PrefixIndex index_;
  std::atomic<uint64_t> picks_{0};
  std::atomic<uint64_t> prefill_cursor_{0};
  std::atomic<uint64_t> decode_cursor_{0};
};

// Load score for least_loaded: running + queued + sent since the last heartbeat.
uint64_t LoadScore(const WorkerSnapshot& worker);

}  // namespace pdspark::router
