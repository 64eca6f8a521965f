#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace pdspark::sampling {

TokenLogprob ComputeTokenLogprob(std::span<const float> logits, int32_t token, int32_t num_top) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  // log_softmax(x) = x - (max + log sum exp(x - max)).
  const double log_normaliser = static_cast<double>(max_logit) + std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[id]) - log_normaliser);
  };

  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  const float chosen = logits[token];
  out.rank = 1 + static_cast<int32_t>(std::count_if(logits.begin(), logits.end(),
                                                    [&](float x) { return x > chosen; }));
  const int64_t k = std::min<int64_t>(std::max(num_top, 0), static_cast<int64_t>(logits.size()));
  if (k == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int64_t i = 0; i < k; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

}  // namespace pdspark::sampling
