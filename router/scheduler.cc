#include "router/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/prefix_hash.h"

namespace pdspark::router {

StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name) {
  if (name == "round_robin") return SchedulingPolicy::kRoundRobin;
  if (name == "least_loaded") return SchedulingPolicy::kLeastLoaded;
  if (name == "kv_aware") return SchedulingPolicy::kKvAware;
  return absl::InvalidArgumentError(absl::StrCat("unknown scheduling policy '", std::string(name),
                                                 "' (round_robin, least_loaded, kv_aware)"));
}

std::string_view SchedulingPolicyName(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kRoundRobin:
      return "round_robin";
    case SchedulingPolicy::kLeastLoaded:
      return "least_loaded";
    case SchedulingPolicy::kKvAware:
      return "kv_aware";
  }
  return "unknown";
}

uint64_t LoadScore(const WorkerSnapshot& w) {
  return uint64_t{w.load.running_requests()} + w.load.queued_requests() +
         w.assigned_since_heartbeat;
}

Scheduler::Scheduler(WorkerRegistry* registry, SchedulingPolicy prefill_policy,
                     SchedulingPolicy decode_policy, KvAwareOptions kv)
    : registry_(registry),
      prefill_policy_(prefill_policy),
      decode_policy_(decode_policy),
      kv_(kv) {}

StatusOr<Assignment> Scheduler::Pick(const std::vector<uint32_t>& prompt) {
  std::optional<WorkerSnapshot> decode =
      Choose(registry_->Healthy(v1::WORKER_ROLE_DECODE), decode_policy_, &decode_cursor_, prompt);
  if (!decode) return absl::UnavailableError("no healthy decode worker");
  Assignment a{Choose(registry_->Healthy(v1::WORKER_ROLE_PREFILL), prefill_policy_,
                      &prefill_cursor_, prompt),
               std::move(*decode)};
  registry_->NoteAssigned(a.decode.worker_id);
  if (a.prefill) registry_->NoteAssigned(a.prefill->worker_id);
  if (prefill_policy_ == SchedulingPolicy::kKvAware ||
      decode_policy_ == SchedulingPolicy::kKvAware) {
    // The worker that prefills holds the prefix afterwards.
    index_.Record(a.prefill ? a.prefill->worker_id : a.decode.worker_id, prompt);
    if (a.prefill) index_.Record(a.decode.worker_id, prompt);
    if (picks_.fetch_add(1) % 256 == 255) {
      std::vector<std::string> live;
      for (const WorkerSnapshot& w : registry_->All()) live.push_back(w.worker_id);
      index_.Retain(live);
    }
  }
  return a;
}

std::optional<WorkerSnapshot> Scheduler::PickReplacement(v1::WorkerRole role,
                                                         const std::vector<uint32_t>& prompt,
                                                         const std::vector<std::string>& exclude) {
  std::vector<WorkerSnapshot> candidates = registry_->Healthy(role);
  std::erase_if(candidates, [&](const WorkerSnapshot& w) {
    return std::find(exclude.begin(), exclude.end(), w.worker_id) != exclude.end();
  });
  const bool prefill = role == v1::WORKER_ROLE_PREFILL;
  std::optional<WorkerSnapshot> chosen =
      Choose(std::move(candidates), prefill ? prefill_policy_ : decode_policy_,
             prefill ? &prefill_cursor_ : &decode_cursor_, prompt);
  if (chosen) registry_->NoteAssigned(chosen->worker_id);
  return chosen;
}

template <typename Cost>
size_t Scheduler::ArgMin(const std::vector<WorkerSnapshot>& candidates, uint64_t turn,
                         Cost cost) const {
  const size_t n = candidates.size();
  size_t best = turn % n;
  uint64_t best_cost = cost(candidates[best]);
  for (size_t k = 1; k < n; ++k) {
    const size_t i = (turn + k) % n;
    const uint64_t c = cost(candidates[i]);
    if (c < best_cost || (c == best_cost && candidates[i].load.free_cache_blocks() >
                                                candidates[best].load.free_cache_blocks())) {
      best = i;
      best_cost = c;
    }
  }
  return best;
}

bool Scheduler::Imbalanced(const std::vector<WorkerSnapshot>& candidates) const {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const WorkerSnapshot& w : candidates) {
    lo = std::min(lo, LoadScore(w));
    hi = std::max(hi, LoadScore(w));
  }
  return hi - lo > kv_.imbalance_abs && hi > kv_.imbalance_ratio * lo;
}

// What the worker reported cached (its prefix cache's entries), or, when more, what this router
// sent it since that report (cached, but not reported yet).
uint32_t Scheduler::CachedTokens(const WorkerSnapshot& worker, const std::vector<uint32_t>& prompt,
                                 std::span<const uint64_t> prefix_hashes) {
  if (worker.cached_prefixes) index_.Supersede(worker.worker_id, worker.cached_prefixes.get());
  const uint32_t sent = index_.OverlapTokens(worker.worker_id, prompt);
  if (!worker.cached_prefixes) return sent;
  return std::max(sent, worker.cached_prefixes->LongestPrefix(prefix_hashes));
}

std::optional<WorkerSnapshot> Scheduler::Choose(std::vector<WorkerSnapshot> candidates,
                                                SchedulingPolicy policy,
                                                std::atomic<uint64_t>* cursor,
                                                const std::vector<uint32_t>& prompt) {
  if (candidates.empty()) return std::nullopt;
  const uint64_t turn = cursor->fetch_add(1);
  if (policy == SchedulingPolicy::kRoundRobin) {
    return candidates[turn % candidates.size()];
  }
  if (policy == SchedulingPolicy::kKvAware && !Imbalanced(candidates)) {
    const uint64_t prompt_tokens = prompt.size();
    const std::vector<uint64_t> hashes = PrefixHashes(std::span<const uint32_t>(prompt));
    return candidates[ArgMin(candidates, turn, [&](const WorkerSnapshot& w) {
      const uint64_t uncached = prompt_tokens - CachedTokens(w, prompt, hashes);
      return uncached + uint64_t{kv_.load_cost_tokens} * LoadScore(w);
    })];
  }
  return candidates[ArgMin(candidates, turn, [](const WorkerSnapshot& w) { return LoadScore(w); })];
}

}  // namespace pdspark::router
