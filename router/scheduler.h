// Chooses the workers for each request: a decode worker always, and a prefill worker when
// there is one (otherwise the decode worker prefills locally, the colocated path). Prefill and
// decode have separate policies because their loads differ (prefill is compute-bound and
// bursty; decode is bounded by running sequences and cache).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "router/worker_registry.h"

namespace pdspark::router {

enum class SchedulingPolicy { kRoundRobin, kLeastLoaded };

StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name);
std::string_view SchedulingPolicyName(SchedulingPolicy policy);

struct Assignment {
  std::optional<WorkerSnapshot> prefill;  // empty: colocated
  WorkerSnapshot decode;
};

class Scheduler {
 public:
  Scheduler(WorkerRegistry* registry, SchedulingPolicy prefill_policy,
            SchedulingPolicy decode_policy);

  // Unavailable when no healthy decode worker exists. `exclude` skips one decode worker (a
  // retry after it failed). Notes the assignment in the registry.
  StatusOr<Assignment> Pick(const std::string& exclude_decode = "");

  SchedulingPolicy decode_policy() const { return decode_policy_; }
  SchedulingPolicy prefill_policy() const { return prefill_policy_; }

 private:
  std::optional<WorkerSnapshot> Choose(std::vector<WorkerSnapshot> candidates,
                                       SchedulingPolicy policy, std::atomic<uint64_t>* cursor);

  WorkerRegistry* registry_;
  SchedulingPolicy prefill_policy_;
  SchedulingPolicy decode_policy_;
  std::atomic<uint64_t> prefill_cursor_{0};
  std::atomic<uint64_t> decode_cursor_{0};
};

// Load score for least_loaded: running + queued + sent since the last heartbeat.
uint64_t LoadScore(const WorkerSnapshot& worker);

}  // namespace pdspark::router
