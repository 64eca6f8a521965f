#include "engine/sampling/logits_processor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

namespace pdspark::sampling {
namespace {

// A token's rank as one integer: weight descending, then id ascending. Non-negative floats
// order like their bit patterns, so comparisons are plain integer compares and the order is
// total (no two tokens tie), which makes every selection below deterministic.
uint64_t RankKey(float weight, int32_t id) {
  return (uint64_t{std::bit_cast<uint32_t>(weight)} << 32) |
         (0xFFFFFFFFu - static_cast<uint32_t>(id));
}
float KeyWeight(uint64_t key) { return std::bit_cast<float>(static_cast<uint32_t>(key >> 32)); }
int32_t KeyId(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

// Top-p buckets: the top 16 bits of a non-negative float (sign bit 0), so 2^15 buckets.
constexpr int kNumBuckets = 1 << 15;
int Bucket(float weight) { return static_cast<int>(std::bit_cast<uint32_t>(weight) >> 16); }

// Ranges at most this long are finished by sorting.
constexpr size_t kSortBelow = 32;

// Reorders `keys` so that keys[0, m) are the m highest-ranked tokens, where m is the smallest
// count holding at least `limit` of mass (all keys if none does), and returns m. A weighted
// quickselect: expected O(n) instead of a sort.
size_t SelectNucleus(std::vector<uint64_t>& keys, double limit) {
  size_t lo = 0;
  size_t hi = keys.size();
  double kept = 0.0;  // Mass of keys[0, lo), all of which outrank keys[lo, hi).
  while (hi - lo > kSortBelow) {
    const auto first = keys.begin() + lo;
    const auto last = keys.begin() + hi;
    const uint64_t a = *first, b = first[(hi - lo) / 2], c = last[-1];
    const uint64_t pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));
    const auto mid = std::partition(first, last, [pivot](uint64_t k) { return k > pivot; });
    std::iter_swap(mid, std::find(mid, last, pivot));
    double above = 0.0;
    for (auto it = first; it != mid; ++it) above += KeyWeight(*it);
    if (kept + above >= limit) {
      hi = mid - keys.begin();  // The nucleus ends inside the part above the pivot.
      continue;
    }
    kept += above + KeyWeight(*mid);
    lo = mid - keys.begin() + 1;
    if (kept >= limit) return lo;
  }
  std::sort(keys.begin() + lo, keys.begin() + hi, std::greater<>());
  for (size_t i = lo; i < hi; ++i) {
    if (kept >= limit) return i;
    kept += KeyWeight(keys[i]);
  }
  return hi;
}

// The k-th largest weight (counting repeats). A size-k min-heap touches each weight once and
// rarely does more than one compare, which beats nth_element on a copy for small k.
float KthLargest(std::span<const float> probs, int32_t k) {
  if (static_cast<size_t>(k) > probs.size() / 16) {
    std::vector<float> sorted(probs.begin(), probs.end());
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
    return sorted[k - 1];
  }
  std::vector<float> heap(probs.begin(), probs.begin() + k);
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  for (size_t i = k; i < probs.size(); ++i) {
    if (probs[i] > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = probs[i];
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  }
  return heap.front();
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
  const float threshold = KthLargest(probs, k);
  for (float& p : probs) {
    if (p < threshold) p = 0.0f;
  }
}

void ApplyTopP(std::span<float> probs, float top_p) {
  if (top_p >= 1.0f) return;
  // Pass 1: mass per bucket of the weight's top 16 bits (non-negative floats order like their
  // bits, so buckets are ordered). Reused per thread: 256 KiB zeroed beats a fresh allocation.
  thread_local std::vector<double> bucket_mass(kNumBuckets);
  std::fill(bucket_mass.begin(), bucket_mass.end(), 0.0);
  double total = 0.0;
  for (float p : probs) {
    if (p > 0.0f) {
      bucket_mass[Bucket(p)] += p;
      total += p;
    }
  }
  const double limit = static_cast<double>(top_p) * total;
  // The nucleus ends in the first bucket (from the top) where the running mass reaches limit.
  double above = 0.0;
  int boundary = kNumBuckets - 1;
  for (; boundary >= 0; --boundary) {
    if (above + bucket_mass[boundary] >= limit) break;
    above += bucket_mass[boundary];
  }
  if (boundary < 0) return;  // Rounding kept the running mass below limit: keep everything.
  // Pass 2: higher buckets stay, lower ones go, the boundary bucket is resolved exactly.
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!(probs[i] > 0.0f)) continue;
    const int bucket = Bucket(probs[i]);
    if (bucket == boundary) {
      keys.push_back(RankKey(probs[i], static_cast<int32_t>(i)));
    } else if (bucket < boundary) {
      probs[i] = 0.0f;
    }
  }
  const size_t keep = SelectNucleus(keys, limit - above);
  for (size_t i = keep; i < keys.size(); ++i) probs[KeyId(keys[i])] = 0.0f;
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
