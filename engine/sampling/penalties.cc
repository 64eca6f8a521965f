#include "engine/sampling/penalties.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace pdspark::sampling {
namespace {

bool InVocab(int32_t id, std::span<const float> logits) {
  return id >= 0 && static_cast<size_t>(id) < logits.size();
}

void ApplyBadWords(const SamplingParams& params, std::span<const int32_t> output,
                   std::span<float> logits) {
  for (const std::vector<int32_t>& word : params.bad_words) {
    if (word.empty() || !InVocab(word.back(), logits)) continue;
    const size_t prefix = word.size() - 1;
    if (prefix > output.size()) continue;
    if (std::equal(word.begin(), word.end() - 1, output.end() - prefix)) {
      logits[word.back()] = -std::numeric_limits<float>::infinity();
    }
  }
}

void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> prompt,
                    std::span<const int32_t> output, std::span<float> logits) {
  std::unordered_map<int32_t, int32_t> output_counts;
  for (int32_t id : output) {
    if (InVocab(id, logits)) ++output_counts[id];
  }
  if (params.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen;
    for (int32_t id : prompt) {
      if (InVocab(id, logits)) seen.insert(id);
    }
    for (const auto& [id, count] : output_counts) seen.insert(id);
    for (int32_t id : seen) {
      float& x = logits[id];
      x = x > 0 ? x / params.repetition_penalty : x * params.repetition_penalty;
    }
  }
  for (const auto& [id, count] : output_counts) {
    logits[id] -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
  }
}

}  // namespace

bool HasLogitAdjustments(const SamplingParams& params) {
  return !params.logit_bias.empty() || !params.bad_words.empty() ||
         params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
         params.presence_penalty != 0.0f;
}

void ApplyLogitAdjustments(const SamplingParams& params, std::span<const int32_t> prompt,
                           std::span<const int32_t> output, std::span<float> logits) {
  for (const auto& [id, bias] : params.logit_bias) {
    if (InVocab(id, logits)) logits[id] += bias;
  }
  ApplyBadWords(params, output, logits);
  if (params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
      params.presence_penalty != 0.0f) {
    ApplyPenalties(params, prompt, output, logits);
  }
}

}  // namespace pdspark::sampling
