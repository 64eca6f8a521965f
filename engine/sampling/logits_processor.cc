#include "engine/sampling/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace pdspark::sampling {
namespace {

// Orders token ids by weight descending, then id ascending, so the order is total.
struct ByWeightDescending {
  std::span<const float> probs;
  bool operator()(int32_t a, int32_t b) const {
    if (probs[a] != probs[b]) return probs[a] > probs[b];
    return a < b;
  }
};

// Top-p only needs the head of the sorted order; in practice the nucleus is a few hundred
// tokens out of ~129k, so sort a head of this size first and fall back to a full sort only
// when the head does not hold enough mass.
constexpr size_t kTopPHeadSize = 1024;

// Returns how many of `order` (sorted by weight descending) the nucleus keeps, or
// order.size() + 1 when the nucleus may extend past the end of `order`.
size_t NucleusSize(std::span<const float> probs, std::span<const int32_t> order, double limit) {
  double mass_before = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (mass_before >= limit) return i;
    mass_before += probs[order[i]];
  }
  return mass_before >= limit ? order.size() : order.size() + 1;
}

void OneHot(int32_t id, std::span<float> probs) {
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (id >= 0) probs[id] = 1.0f;
}

}  // namespace

int32_t Argmax(std::span<const float> values) {
  if (values.empty()) return -1;
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    // Strict compare keeps the lowest id on ties; the NaN check lets a real value replace a
    // leading NaN.
    if (values[i] > values[best] || (std::isnan(values[best]) && !std::isnan(values[i]))) {
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

void SoftmaxWithTemperature(std::span<const float> logits, float temperature,
                            std::span<float> probs) {
  const int32_t top = Argmax(logits);
  if (top < 0) return;
  const float max_logit = logits[top];
  if (!std::isfinite(max_logit)) {
    OneHot(top, probs);
    return;
  }
  const float inv_t = 1.0f / temperature;
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    // `!(x > -inf)` also catches NaN.
    const float e =
        (x > -std::numeric_limits<float>::infinity()) ? std::exp((x - max_logit) * inv_t) : 0.0f;
    probs[i] = e;
    sum += e;
  }
  const float inv_sum = static_cast<float>(1.0 / sum);  // sum >= 1: the max term is exp(0).
  for (float& p : probs) p *= inv_sum;
}

void ApplyTopK(std::span<float> probs, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= probs.size()) return;
  std::vector<float> sorted(probs.begin(), probs.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const float threshold = sorted[k - 1];
  for (float& p : probs) {
    if (p < threshold) p = 0.0f;
  }
}

void ApplyTopP(std::span<float> probs, float top_p) {
  if (top_p >= 1.0f) return;
  std::vector<int32_t> order;
  order.reserve(probs.size());
  double total = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0f) {
      order.push_back(static_cast<int32_t>(i));
      total += probs[i];
    }
  }
  const double limit = static_cast<double>(top_p) * total;
  const ByWeightDescending cmp{probs};
  size_t keep = order.size() + 1;
  if (order.size() > kTopPHeadSize) {
    std::partial_sort(order.begin(), order.begin() + kTopPHeadSize, order.end(), cmp);
    keep = NucleusSize(probs, std::span(order).first(kTopPHeadSize), limit);
  }
  if (keep > kTopPHeadSize || order.size() <= kTopPHeadSize) {
    std::sort(order.begin(), order.end(), cmp);
    keep = std::min(NucleusSize(probs, order, limit), order.size());
  }
  for (size_t i = keep; i < order.size(); ++i) probs[order[i]] = 0.0f;
}

void ApplyMinP(std::span<float> probs, float min_p) {
  if (min_p <= 0.0f || probs.empty()) return;
  const float threshold = min_p * *std::max_element(probs.begin(), probs.end());
  for (float& p : probs) {
    if (p < threshold) p = 0.0f;
  }
}

void Normalize(std::span<float> probs) {
  const double sum = std::accumulate(probs.begin(), probs.end(), 0.0);
  if (sum <= 0.0) return;
  const double inv = 1.0 / sum;
  for (float& p : probs) p = static_cast<float>(p * inv);
}

void ProcessLogits(std::span<const float> logits, const SamplingParams& params,
                   std::span<float> probs) {
  if (params.greedy()) {
    OneHot(Argmax(logits), probs);
    return;
  }
  SoftmaxWithTemperature(logits, params.temperature, probs);
  bool masked = false;
  if (params.top_k_enabled() && static_cast<size_t>(params.top_k) < probs.size()) {
    ApplyTopK(probs, params.top_k);
    masked = true;
  }
  if (params.top_p_enabled()) {
    ApplyTopP(probs, params.top_p);
    masked = true;
  }
  if (params.min_p_enabled()) {
    ApplyMinP(probs, params.min_p);
    masked = true;
  }
  if (masked) Normalize(probs);
}

std::vector<float> ProcessLogits(std::span<const float> logits, const SamplingParams& params) {
  std::vector<float> probs(logits.size());
  ProcessLogits(logits, params, probs);
  return probs;
}

void ProcessLogitsRows(std::span<const float> logits, int64_t vocab_size,
                       const SamplingParams& params, std::span<float> probs) {
  if (vocab_size <= 0) return;
  const size_t vocab = static_cast<size_t>(vocab_size);
  for (size_t begin = 0; begin + vocab <= logits.size(); begin += vocab) {
    ProcessLogits(logits.subspan(begin, vocab), params, probs.subspan(begin, vocab));
  }
}

}  // namespace pdspark::sampling
