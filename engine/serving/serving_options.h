// What a serving engine is configured with: batching limits, DSpark speculation, and the
// vocabulary structured output masks with.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "engine/dspark/drafter.h"
#include "engine/sampling/speculative_acceptance.h"
#include "engine/sampling/token_vocabulary.h"
#include "engine/serving/speculation/spec_cost_model.h"

namespace pdspark::serving {

struct ServingOptions {
  int64_t max_num_seqs = 64;       // running requests at once
  int64_t max_batch_tokens = 512;  // tokens per step across requests (chunked prefill budget)
  int64_t max_model_len = 0;       // 0 = the config's max_position_embeddings
  int64_t max_waiting = 1024;      // admitted but not yet running
  // DSpark speculative decoding: with a drafter and spec_tokens >= 1, every decode-phase
  // request drafts min(spec_tokens, block_size) tokens per round and all rounds are verified in
  // the step's one batched forward. The model must export the drafter's feature layers (the
  // default ModelOptions do for a DSpark checkpoint).
  std::shared_ptr<const dspark::Drafter> drafter;
  int64_t spec_tokens = 0;  // 0 = off
  // Confidence-scheduled speculation (`--spec-tokens auto`, dspark_dsv4.md B.4; docs/dspark.md):
  // each step decides from predicted survivals and the measured costs of the drafter and the
  // target whether to draft, for which requests and how many slots, then picks every drafting
  // request's verify prefix from its calibrated confidences (Algorithm 1 with early stop).
  // Prefixes whose survival is below spec_auto_min_survival are never verified.
  bool spec_auto = false;
  double spec_auto_min_survival = 0.05;
  // Draft only when that is predicted to beat a plain step by this factor (hysteresis against
  // drafting on a gain within the cost model's error).
  double spec_auto_min_speedup = 1.03;
  // The costs auto schedules with; unset: measured at startup (SpecCostModel::Measure). Tests
  // give fixed ones to exercise the schedule independently of machine timing, e.g.
  // SpecCostModel::Unprofiled(): every step costs the same and drafting is free, so every
  // candidate drafts and verifies whatever clears the survival floor.
  std::optional<SpecCostModel> spec_auto_costs;
  // How sampled requests' drafts are judged (sampling::SpecAcceptance): rejection sampling
  // accepts the most drafts; coupled keeps the drafter's and the verify rows' logits where they
  // are computed (OutputProcessor::ArgmaxSuffices), what a GPU wants. ApplySpecSettings picks
  // coupled for a model on GPUs.
  sampling::SpecAcceptance spec_acceptance = sampling::SpecAcceptance::kRejection;
  // Automatic prefix caching (engine/serving/prefix_cache.h): requests reuse the state of
  // prompts (and finished requests) computed before. Off in the library, on in the workers
  // (--enable-prefix-caching, as vLLM). Branch points fall on multiples of
  // prefix_cache_block_tokens; at most prefix_cache_max_entries states are kept.
  bool enable_prefix_caching = false;
  int64_t prefix_cache_block_tokens = 32;
  int64_t prefix_cache_max_entries = 4096;
  // The tokens' bytes, for structured output (TokenVocabulary::FromModelDir); unset: requests
  // with a grammar are refused.
  std::shared_ptr<const sampling::TokenVocabulary> vocabulary;
  // Steps whose every request decodes greedily or samples by a Gumbel-max draw and reads
  // nothing else of the logits (OutputProcessor::ArgmaxSuffices) take only the rows' argmax ids
  // from the model, found where the logits are (engine::StepOptions::argmax_only; a sampled
  // row is perturbed for its Gumbel-max draw first): on a GPU, a few bytes per row cross to the
  // host instead of the vocabulary's logits. The same tokens either way.
  bool argmax_on_device = true;
};

}  // namespace pdspark::serving
