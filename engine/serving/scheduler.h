// The serving engine's scheduler (vLLM v1's split): which waiting requests join the running
// batch — each leases its worst-case cache of the KV pool first (engine/serving/cache_ledger.h),
// first come first served, except that a request bringing its lease from a KV transfer never
// waits behind one that needs cache — and what each running request feeds in the next step
// under the token budget (decode tokens and verify rounds first, then prefill chunks).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "engine/model/model.h"
#include "engine/serving/active_request.h"
#include "engine/serving/cache_ledger.h"
#include "engine/serving/serving_options.h"

namespace pdspark::serving {

class Scheduler {
 public:
  // `drafting`: requests hold a DSpark context ring of `ring_bytes` pool bytes.
  Scheduler(const ServingOptions& options, const engine::Model& model, int64_t max_model_len,
            bool drafting, int64_t ring_bytes);

  // Moves requests from `waiting` to `running` while they fit (max_num_seqs, the pool).
  void Admit(std::deque<std::unique_ptr<ActiveRequest>>& waiting,
             std::vector<std::unique_ptr<ActiveRequest>>& running);
  // The next step: the requests in it, each feeding chunks[i] (inputs[i] points at them).
  std::vector<ActiveRequest*> PlanStep(const std::vector<std::unique_ptr<ActiveRequest>>& running,
                                       std::vector<engine::StepInput>& inputs,
                                       std::vector<std::vector<int32_t>>& chunks) const;

  // Worst-case pool bytes of a sequence of `tokens` tokens (with a ring when `drafting`), its
  // windows widened by `kept_extra_tokens` (RequestSpec::kept_extra_tokens).
  int64_t CacheBytesFor(int64_t tokens, bool drafting, int64_t kept_extra_tokens = 0) const;
  // What the request leases: the prompt alone for a prefill, else the prompt plus max_tokens
  // (drafts are clamped to both limits), capped by the model length.
  int64_t CacheReservation(const RequestSpec& spec) const;
  // A lease for a KV transfer's request (thread-safe); ResourceExhausted when it does not fit.
  StatusOr<CacheLease> ReserveCache(int64_t prompt_tokens, int64_t max_tokens) const;
  // InvalidArgument (naming the flags) when one --max-model-len request cannot fit the pool.
  Status CheckCacheBudget() const;
  int64_t capacity_bytes() const { return ledger_->capacity(); }
  int64_t leased_bytes() const { return ledger_->leased(); }

 private:
  int64_t CacheBytesForRequest(int64_t prompt_tokens, int64_t max_tokens, bool prefill_only) const;
  // Leases the request's worst case, adopting the lease a prefilled request brings; false when
  // the pool cannot hold it yet.
  bool LeaseCache(ActiveRequest& request) const;

  const ServingOptions& options_;
  const engine::Model& model_;
  const int64_t max_model_len_;
  const bool drafting_;
  const int64_t ring_bytes_;
  std::shared_ptr<CacheLedger> ledger_;
};

}  // namespace pdspark::serving
