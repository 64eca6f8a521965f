#include "engine/serving/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/cache/cache_budget.h"

namespace pdspark::serving {

Scheduler::Scheduler(const ServingOptions& options, const engine::Model& model,
                     int64_t max_model_len, bool drafting, int64_t ring_bytes)
    : options_(options),
      model_(model),
      max_model_len_(max_model_len),
      drafting_(drafting),
      ring_bytes_(ring_bytes),
      ledger_(std::make_shared<CacheLedger>(model.kv_pool().capacity_bytes())) {}

void Scheduler::Admit(std::deque<std::unique_ptr<ActiveRequest>>& waiting,
                      std::vector<std::unique_ptr<ActiveRequest>>& running) {
  int64_t active = 0;
  for (const auto& r : running) active += r->done ? 0 : 1;
  // A request that brings its lease (its KV transfer reserved the cache) owns its pages already:
  // it must not wait behind one that waits for cache, which may be waiting for that very lease.
  for (auto it = waiting.begin(); it != waiting.end() && active < options_.max_num_seqs;) {
    ActiveRequest& request = **it;
    const bool brings_lease = request.spec.prefilled && request.spec.prefilled->lease.bytes() > 0;
    if (!brings_lease || !LeaseCache(request)) {
      ++it;
      continue;
    }
    running.push_back(std::move(*it));
    it = waiting.erase(it);
    ++active;
  }
  while (!waiting.empty() && active < options_.max_num_seqs) {
    // First come, first served: the head of the queue waits for cache, nobody overtakes it.
    if (!LeaseCache(*waiting.front())) break;
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
    ++active;
  }
}

std::vector<ActiveRequest*> Scheduler::PlanStep(
    const std::vector<std::unique_ptr<ActiveRequest>>& running,
    std::vector<engine::StepInput>& inputs, std::vector<std::vector<int32_t>>& chunks) const {
  std::vector<ActiveRequest*> planned;
  int64_t budget = options_.max_batch_tokens;
  // Decode tokens first (one each) so running requests keep their pace; prefill chunks take
  // what is left of the token budget, but at least one chunk always makes progress.
  std::vector<ActiveRequest*> order;
  for (const auto& r : running) {
    if (r->live() && r->pending() == 1) order.push_back(r.get());
  }
  for (const auto& r : running) {
    if (r->live() && r->pending() > 1) order.push_back(r.get());
  }
  for (ActiveRequest* r : order) {
    if (!r->draft.empty()) {  // a verify round: [anchor, d_1..d_gamma] in one piece
      const int64_t need = 1 + static_cast<int64_t>(r->draft.size());
      if (need > budget && !planned.empty()) {
        r->draft.clear();
        r->draft_probs.clear();
      } else {
        budget -= need;
        chunks.emplace_back(r->tokens.end() - 1, r->tokens.end());
        chunks.back().insert(chunks.back().end(), r->draft.begin(), r->draft.end());
        planned.push_back(r);
        continue;
      }
    }
    int64_t take = std::min(r->pending(), std::max<int64_t>(budget, planned.empty() ? 1 : 0));
    // A prefill chunk ends where the prefix cache wants the state stored.
    if (r->store_at > r->fed()) take = std::min(take, r->store_at - r->fed());
    if (take <= 0) break;
    budget -= take;
    chunks.emplace_back(r->tokens.begin() + r->fed(), r->tokens.begin() + r->fed() + take);
    planned.push_back(r);
  }
  for (size_t i = 0; i < planned.size(); ++i)
    inputs.push_back({planned[i]->state.get(), chunks[i]});
  return planned;
}

int64_t Scheduler::CacheBytesFor(int64_t tokens, bool drafting, int64_t kept_extra_tokens) const {
  // A verify round feeds block_size + 1 tokens even when that exceeds max_batch_tokens. Rows
  // kept for a transfer (RequestSpec::keep_rows_from) widen a window as a longer step would.
  const int64_t step_tokens =
      std::max<int64_t>(options_.max_batch_tokens,
                        options_.drafter ? options_.drafter->block_size() + 1 : 1) +
      kept_extra_tokens;
  const int64_t pools = engine::TotalBytes(engine::SequenceBytesBound(
      model_.cache_layout(), model_.page_geometry(), tokens, step_tokens));
  return pools + (drafting ? ring_bytes_ : 0);
}

Status Scheduler::CheckCacheBudget() const {
  const int64_t need = CacheBytesFor(max_model_len_, drafting_);
  if (need <= capacity_bytes()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-cache-memory-bytes ", capacity_bytes(), " cannot hold one sequence of ",
                   "--max-model-len ", max_model_len_, " tokens (needs ", need,
                   " bytes): raise the budget or lower --max-model-len"));
}

// The most tokens the request's state can hold: the prompt alone for a prefill, else the
// prompt plus max_tokens (drafts are clamped to both limits), capped by the model length. A
// prefill builds the DSpark ring too when the engine speculates (the prefill worker ships it).
int64_t Scheduler::CacheBytesForRequest(int64_t prompt_tokens, int64_t max_tokens,
                                        bool prefill_only) const {
  if (prefill_only) return CacheBytesFor(prompt_tokens, drafting_);
  return CacheBytesFor(std::min(prompt_tokens + max_tokens, max_model_len_), drafting_);
}

int64_t Scheduler::CacheReservation(const RequestSpec& spec) const {
  if (spec.prefill_only && spec.kept_extra_tokens > 0) {
    return CacheBytesFor(static_cast<int64_t>(spec.prompt.size()), drafting_,
                         spec.kept_extra_tokens);
  }
  return CacheBytesForRequest(
      static_cast<int64_t>(spec.prompt.size()),
      std::max<int64_t>(spec.sampling.max_tokens, static_cast<int64_t>(spec.generated.size())),
      spec.prefill_only);
}

bool Scheduler::LeaseCache(ActiveRequest& request) const {
  // Adopted once: a later call (the lease could not grow yet) must keep what it holds.
  if (request.spec.prefilled && request.spec.prefilled->lease.bytes() > 0) {
    request.lease = std::move(request.spec.prefilled->lease);
  }
  const int64_t need = CacheReservation(request.spec);
  if (request.lease.bytes() >= need) return true;
  if (request.lease.bytes() > 0) return request.lease.Grow(need - request.lease.bytes());
  auto lease = ledger_->TryLease(need);
  if (!lease) return false;
  request.lease = std::move(*lease);
  return true;
}

StatusOr<CacheLease> Scheduler::ReserveCache(int64_t prompt_tokens, int64_t max_tokens) const {
  const int64_t need = CacheBytesForRequest(prompt_tokens, std::max<int64_t>(max_tokens, 1), false);
  auto lease = ledger_->TryLease(need);
  if (!lease) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool fully leased: ", ledger_->leased(),
                                                     " of ", ledger_->capacity(), " bytes, ", need,
                                                     " more needed (--kv-cache-memory-bytes)"));
  }
  return std::move(*lease);
}

}  // namespace pdspark::serving
