// Confidence-scheduled verification (`--spec-tokens auto`, dspark_dsv4.md B.4), as pure
// functions of survivals and measured costs so they can be tested without a model.
//
// A step commits, in expectation, one token per decoding request plus the survival
// S_{r,k} = prod_{j<=k} c_{r,j} of every draft it verifies. Two decisions per step:
//   * before drafting (PlanDrafts): whether to run the drafter at all, for which requests and
//     with how many slots, from survivals predicted from past rounds and the drafter's measured
//     cost — on a CPU a drafter forward can cost more than the target step it saves;
//   * after drafting (ChooseVerifyLengths): each request's verify prefix from its current
//     calibrated survivals (the drafter cost is now sunk), by the paper's Algorithm 1.
// Neither looks at a draft token before deciding to verify it: PlanDrafts uses only past
// rounds, and Algorithm 1 stops at the first candidate that does not pay, before any survival
// that depends on that candidate's token (c_{k+1} embeds d_k) is looked at. Both keep
// speculative sampling exactly the target distribution (the paper's Appendix A).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace pdspark::dspark {

// The part of a step that does not depend on drafts: `sequences` sequences feeding `rows`
// rows, committing `tokens` tokens (one per decoding request); at most `max_rows` rows.
struct StepBase {
  int64_t sequences = 0;
  int64_t rows = 0;
  double tokens = 0;
  int64_t max_rows = std::numeric_limits<int64_t>::max();
};

// Seconds of a target step over `sequences` sequences and `rows` rows in all.
using TargetCost = std::function<double(int64_t sequences, int64_t rows)>;
// Seconds of a drafter forward for `requests` requests drafting `gamma` slots each.
using DraftCost = std::function<double(int64_t requests, int64_t gamma)>;

// Algorithm 1 with early stop: candidates (r, k) in order of S_{r,k} (earlier slot first on
// ties, so prefixes are kept), each added while the step's expected tokens per second grows,
// S_{r,k} >= min_survival and the rows fit; the first one that fails ends the search.
// survival[r] must be non-increasing. Returns each request's number of drafts to verify.
std::vector<int64_t> ChooseVerifyLengths(const std::vector<std::vector<double>>& survival,
                                         const StepBase& base, const TargetCost& cost,
                                         double min_survival);

struct DraftPlan {
  int64_t gamma = 0;               // slots to draft; 0 = plain step
  std::vector<size_t> requests;    // indices into the candidates, best first
  double predicted_speedup = 1.0;  // predicted tokens/s over the plain step's
};

// Chooses a draft length g (1..max_slots) and the k candidates with the largest predicted gain
// within g (k = 1, 2, 4, ..., all) maximising predicted tokens per second of drafter + step,
// where the step verifies what ChooseVerifyLengths would pick on the predictions; gamma 0 when
// no choice beats the plain step by the factor min_speedup (a margin against drafting on a
// predicted gain smaller than the predictions' error). predicted[r]: survivals expected for
// candidate r (length >= its cap), cap[r]: the most slots r may draft; setup[r] (empty: none):
// seconds r costs before it can draft at all (its drafter ring catching up with the positions
// it has not drafted from), added to the plan's cost and, at the plain rate, taken from r's
// gain when candidates are ranked.
DraftPlan PlanDrafts(const std::vector<std::vector<double>>& predicted,
                     const std::vector<int64_t>& cap, int64_t max_slots, const StepBase& base,
                     const TargetCost& target, const DraftCost& draft, double min_survival,
                     double min_speedup = 1.0, const std::vector<double>& setup = {});

}  // namespace pdspark::dspark
