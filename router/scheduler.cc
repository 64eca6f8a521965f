#include "router/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdspark::router {

StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name) {
  if (name == "round_robin") return SchedulingPolicy::kRoundRobin;
  if (name == "least_loaded") return SchedulingPolicy::kLeastLoaded;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scheduling policy '", std::string(name),
                   "' (round_robin, least_loaded)"));
}

std::string_view SchedulingPolicyName(SchedulingPolicy policy) {
  return policy == SchedulingPolicy::kRoundRobin ? "round_robin" : "least_loaded";
}

uint64_t LoadScore(const WorkerSnapshot& w) {
  return uint64_t{w.load.running_requests()} + w.load.queued_requests() +
         w.assigned_since_heartbeat;
}

Scheduler::Scheduler(WorkerRegistry* registry, SchedulingPolicy prefill_policy,
                     SchedulingPolicy decode_policy)
    : registry_(registry), prefill_policy_(prefill_policy), decode_policy_(decode_policy) {}

StatusOr<Assignment> Scheduler::Pick(const std::string& exclude_decode) {
  std::vector<WorkerSnapshot> decoders = registry_->Healthy(v1::WORKER_ROLE_DECODE);
  std::erase_if(decoders, [&](const WorkerSnapshot& w) { return w.worker_id == exclude_decode; });
  std::optional<WorkerSnapshot> decode = Choose(std::move(decoders), decode_policy_,
                                                &decode_cursor_);
  if (!decode) return absl::UnavailableError("no healthy decode worker");
  Assignment a{Choose(registry_->Healthy(v1::WORKER_ROLE_PREFILL), prefill_policy_,
                      &prefill_cursor_),
               std::move(*decode)};
  registry_->NoteAssigned(a.decode.worker_id);
  if (a.prefill) registry_->NoteAssigned(a.prefill->worker_id);
  return a;
}

std::optional<WorkerSnapshot> Scheduler::Choose(std::vector<WorkerSnapshot> candidates,
                                                SchedulingPolicy policy,
                                                std::atomic<uint64_t>* cursor) {
  if (candidates.empty()) return std::nullopt;
  const uint64_t turn = cursor->fetch_add(1);
  if (policy == SchedulingPolicy::kRoundRobin) {
    return candidates[turn % candidates.size()];
  }
  // Least loaded; ties go to more free cache, then rotate so equal workers share the work.
  const size_t n = candidates.size();
  size_t best = turn % n;
  for (size_t k = 1; k < n; ++k) {
    const size_t i = (turn + k) % n;
    const WorkerSnapshot& c = candidates[i];
    const WorkerSnapshot& b = candidates[best];
    if (LoadScore(c) < LoadScore(b) ||
        (LoadScore(c) == LoadScore(b) &&
         c.load.free_cache_blocks() > b.load.free_cache_blocks())) {
      best = i;
    }
  }
  return candidates[best];
}

}  // namespace pdspark::router
