// Top-k sampling, with top-p and min-p within the top k, as a Gumbel-max draw (gumbel_sampling.h)
// over the tokens above a cut on the row's logits: the draw is then a sample of the row's
// softmax renormalised over the tokens kept, as vLLM's top-k/top-p/min-p sampling is, and
// everything but the cut stays where the logits are. The cut needs only the row's top-k logits:
// a tensor-parallel rank finds its slice's top k (Ops::TopK), the ranks' candidates merge into
// the row's, and every rank sets the same cut (engine/model/vocab_parallel.cc); the host's
// sampler sets it from a row it holds (engine/sampling/sampler.cc), so both draw the same token.
//
// The tokens kept, in rank order (larger logit first, the lower id among equal logits), with
// weights w_i = exp((logit_i - logit_0) / T) in double: the first k, and all tokens tied with
// the k-th logit (top-k keeps ties at its threshold); of those, top-p keeps token i while the
// weight ranked above it is below top_p times the weight of the first k, and min-p keeps token
// i while w_i >= min_p (the best token's weight is 1). These are logits_processor.h's masks
// computed on logits, so both keep the same tokens unless a probability sits within rounding
// of a mask's threshold.
//
// Header-only, for the host.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/gumbel_sampling.h"

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
  std::partial_sort(all.begin(), all.begin() + keep, all.end(), RanksBefore);
  all.resize(keep);
  return all;
}

// Sets draw.cut and draw.cut_token from the row's highest-ranked logits, in rank order (at least
// min(draw.top_k, vocabulary) of them; more are not read). Nothing changes for a greedy draw, one
// without top-k, or a row whose best logit is not finite (its -inf tokens never win anyway).
inline void SetSamplingCut(std::span<const LogitCandidate> ranked, GumbelRow& draw) {
  if (draw.top_k <= 0 || draw.inv_temperature == 0.0 || ranked.empty() ||
      !std::isfinite(ranked[0].logit)) {
    return;
  }
  size_t k = 0;  // NaN logits rank last and are never kept
  while (k < std::min(static_cast<size_t>(draw.top_k), ranked.size()) &&
         !std::isnan(ranked[k].logit)) {
    ++k;
  }
  std::vector<double> weight(k);
  double total = 0.0;
  for (size_t i = 0; i < k; ++i) {
    weight[i] =
        std::exp((static_cast<double>(ranked[i].logit) - ranked[0].logit) * draw.inv_temperature);
    total += weight[i];
  }
  size_t kept = k;
  if (draw.top_p < 1.0f) {
    const double limit = static_cast<double>(draw.top_p) * total;
    double above = 0.0;
    size_t i = 0;
    while (i < k && above < limit) above += weight[i++];
    kept = std::min(kept, std::max<size_t>(i, 1));
  }
  if (draw.min_p > 0.0f) {
    size_t i = 0;
    while (i < k && weight[i] >= static_cast<double>(draw.min_p)) ++i;
    kept = std::min(kept, std::max<size_t>(i, 1));
  }
  const LogitCandidate& last = ranked[kept - 1];
  draw.cut = last.logit;
  // Ties with the k-th logit stay when top-k alone ends the kept tokens there.
  draw.cut_token = kept == static_cast<size_t>(draw.top_k) ? INT32_MAX : last.token;
}

}  // namespace pdspark::kernels
