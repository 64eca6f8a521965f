// Sampling with top-k, top-p and min-p (vLLM's order: top-p and min-p act on what top-k keeps)
// as a Gumbel-max draw (gumbel_sampling.h) over the tokens above a cut on the row's logits: the
// draw is a sample of the row's softmax renormalised over the tokens kept, and everything but
// the cut stays where the logits are. The cut needs only the row's highest logits: a
// tensor-parallel rank finds its slice's best ones (Ops::TopK), the ranks' candidates merge into
// the row's, and every rank sets the same cut (engine/model/vocab_parallel.cc); the host's
// sampler sets it from a row it holds (SetSamplingCutFromRow), so both draw the same token.
//
// The tokens kept, in rank order (larger logit first, the lower id among equal logits), with
// weights w_i = exp((logit_i - logit_0) / T) in units of 2^-60 (softmax_mass.h): with top-k the
// first k and every token tied with the k-th logit (top-k keeps ties at its threshold); top-p
// keeps token i while the weight ranked above it is below top_p times the total (the first k's
// with top-k, else the whole row's mass, an exact sum whatever the ranks); min-p keeps token i
// while w_i >= min_p (the best token's weight is 1). These are logits_processor.h's masks
// computed on logits, so both keep the same tokens unless a probability sits within rounding of
// a mask's threshold. Without top-k the kept tokens can reach far down a flat row: the cut is
// looked for among the row's best first (CutCandidates), then in the whole row ranked.
//
// Header-only, for the host.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/gumbel_sampling.h"
#include "kernels/softmax_mass.h"

namespace pdspark::kernels {

struct LogitCandidate {
  float logit = -INFINITY;
  int32_t token = -1;
};

// Whether a ranks before b: a larger logit, or the same logit and a lower id; NaN after every
// number (as Ops::TopK ranks them).
inline bool RanksBefore(const LogitCandidate& a, const LogitCandidate& b) {
  const bool a_nan = std::isnan(a.logit), b_nan = std::isnan(b.logit);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.logit != b.logit) return a.logit > b.logit;
  return a.token < b.token;
}

// The min(k, n) highest-ranked of the n values (value j is token first_token + j), in rank
// order.
inline std::vector<LogitCandidate> TopCandidates(const float* values, int64_t n, int64_t k,
                                                 int64_t first_token = 0) {
  std::vector<LogitCandidate> all(n);
  for (int64_t j = 0; j < n; ++j) all[j] = {values[j], static_cast<int32_t>(first_token + j)};
  const int64_t keep = std::min(k, n);
  // RanksBefore is a total order on distinct tokens, so either way gives what a full sort
  // gives: a heap of the few best (most values lose to its least at once), or for many the
  // best selected in linear time and then sorted.
  // (A lambda, not the function's address, so the comparisons are inlined.)
  const auto before = [](const LogitCandidate& a, const LogitCandidate& b) {
    return RanksBefore(a, b);
  };
  if (keep * 16 < n) {
    std::partial_sort(all.begin(), all.begin() + keep, all.end(), before);
  } else {
    std::nth_element(all.begin(), all.begin() + keep, all.end(), before);
    std::sort(all.begin(), all.begin() + keep, before);
  }
  all.resize(keep);
  return all;
}

// The candidates a draw's cut is first looked for among, in a row of `vocab` tokens: its top k;
// without top-k (top-p or min-p alone) an eighth of the row, at least 64 and at most 1024, where
// the cut of a peaked row lies. When it does not, the whole row is ranked instead.
inline int64_t CutCandidates(const GumbelRow& draw, int64_t vocab) {
  const int64_t candidates = draw.top_k > 0 ? draw.top_k : std::clamp<int64_t>(vocab / 8, 64, 1024);
  return std::min(candidates, vocab);
}

// Sets draw.cut and draw.cut_token from the row's highest-ranked logits, in rank order (without
// top-k: `row_mass` is the whole row's softmax mass against ranked[0], kernels/softmax_mass.h,
// and `whole_row` says whether `ranked` holds every token). Returns false, changing nothing,
// when the candidates end before the cut: rank more. Nothing changes for a greedy draw, one
// without masks, or a row whose best logit is not finite (its -inf tokens never win anyway).
inline bool SetSamplingCut(std::span<const LogitCandidate> ranked, const FixedMass& row_mass,
                           bool whole_row, GumbelRow& draw) {
  if (!HasMasks(draw) || draw.inv_temperature == 0.0 || ranked.empty() ||
      !std::isfinite(ranked[0].logit)) {
    return true;
  }
  // NaN logits rank last and are never kept.
  const size_t limit =
      draw.top_k > 0 ? std::min(static_cast<size_t>(draw.top_k), ranked.size()) : ranked.size();
  size_t k = 0;
  while (k < limit && !std::isnan(ranked[k].logit)) ++k;
  std::vector<uint64_t> units(k);
  FixedMass top_k_mass;
  for (size_t i = 0; i < k; ++i) {
    units[i] = MassUnits(ranked[i].logit, ranked[0].logit, draw.inv_temperature);
    top_k_mass.Add(units[i]);
  }
  const long double total = (draw.top_k > 0 ? top_k_mass : row_mass).Weight();
  const long double top_p_mass = static_cast<long double>(draw.top_p) * total;
  const double min_p_units = static_cast<double>(draw.min_p) * kMassUnit;
  FixedMass above;
  size_t kept = 0;
  while (kept < k && (kept == 0 || ((draw.top_p >= 1.0f || above.Weight() < top_p_mass) &&
                                    static_cast<double>(units[kept]) >= min_p_units))) {
    above.Add(units[kept++]);
  }
  if (kept == k && draw.top_k <= 0 && !whole_row) return false;
  const LogitCandidate& last = ranked[kept - 1];
  draw.cut = last.logit;
  // Ties with the k-th logit stay when top-k alone ends the kept tokens there.
  draw.cut_token =
      draw.top_k > 0 && kept == static_cast<size_t>(draw.top_k) ? INT32_MAX : last.token;
  return true;
}

// The cut from a whole row the host holds (values [0, n) are tokens 0..n-1).
inline void SetSamplingCutFromRow(const float* row, int64_t n, GumbelRow& draw) {
  if (!HasMasks(draw) || draw.inv_temperature == 0.0) return;
  std::vector<LogitCandidate> ranked = TopCandidates(row, n, CutCandidates(draw, n));
  FixedMass mass;
  if (draw.top_k <= 0 && !ranked.empty()) {
    for (int64_t j = 0; j < n; ++j)
      mass.Add(MassUnits(row[j], ranked[0].logit, draw.inv_temperature));
  }
  // A flat row's cut lies past the candidates: eight times as many until it is found.
  while (!SetSamplingCut(ranked, mass, static_cast<int64_t>(ranked.size()) == n, draw)) {
    ranked = TopCandidates(row, n, 8 * static_cast<int64_t>(ranked.size()));
  }
}

}  // namespace pdspark::kernels
