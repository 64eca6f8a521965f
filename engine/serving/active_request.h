// A request from admission to its final event, as the serving engine's parts share it: the
// scheduler plans its steps, the DSpark policy drafts for it, the output processor samples and
// emits. `tokens` is prompt + generated; the sequence state holds the first
// state->num_tokens() of them, so prefill chunks, decode steps and failover replays are all
// "feed the tokens the state does not have yet".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "engine/cache/sequence_state.h"
#include "engine/dspark/drafter_state.h"
#include "engine/sampling/sampler.h"
#include "engine/serving/cache_ledger.h"
#include "engine/serving/request.h"
#include "engine/serving/speculation/pending_context.h"

namespace pdspark::serving {

struct ActiveRequest {
  RequestSpec spec;
  RequestSink sink;
  std::optional<sampling::Sampler> sampler;
  // Structured output: where the committed tokens are in the request's grammar.
  std::optional<structured::GrammarMatcher> grammar;
  std::unique_ptr<engine::SequenceState> state;
  std::vector<int32_t> tokens;
  int64_t generated = 0;
  bool started = false;
  bool done = false;
  Clock::time_point submitted = Clock::now();
  CacheLease lease;  // of the KV pool, from admission to the final event
  SpecStats spec_stats;
  // Prompt logprobs computed so far (sampling.prompt_logprobs), sent with the first token.
  std::vector<sampling::TokenLogprob> prompt_logprobs;
  // DSpark: the drafter context of the first drafter_state->num_positions() tokens, and this
  // round's drafts with, under rejection sampling, the distributions they were drawn from.
  std::unique_ptr<dspark::DrafterState> drafter_state;
  // Target features of the positions after the ring's, not appended yet (see
  // SpecPolicy::CatchUpRing); set whenever drafter_state is.
  std::optional<PendingContext> pending_context;
  std::vector<int32_t> draft;
  std::vector<float> draft_probs;
  // auto: this round's confidence logits (every drafted slot) and the survivals expected of
  // this request's next draft (a running mean of its calibrated survivals; empty = none yet).
  std::vector<float> draft_logits;
  std::vector<double> predicted_survival;
  // Prefix caching: tokens reused from the cache, the position where a step must end so that
  // the state there is stored (0: none), and whether the request is past its prompt (whose
  // state was stored then, unless a verify round took the prompt's last token).
  int64_t cached_tokens = 0;
  int64_t store_at = 0;
  bool prompt_stored = false;

  int64_t fed() const { return state ? state->num_tokens() : 0; }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - fed(); }
  // Running and able to take part in a step.
  bool live() const { return started && !done; }
};

}  // namespace pdspark::serving
