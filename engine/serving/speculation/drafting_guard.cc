#include "engine/serving/speculation/drafting_guard.h"

#include <algorithm>
#include <bit>

namespace pdspark::serving {

namespace {

// Weight of the past per new step: about the last ten steps of a kind count.
constexpr double kDecay = 0.9;

}  // namespace

size_t DraftingGuard::ClassOf(int64_t sequences) {
  return static_cast<size_t>(
      std::bit_width(static_cast<uint64_t>(std::max<int64_t>(sequences, 1))));
}

void DraftingGuard::Observe(int64_t sequences, bool drafted, double tokens, double seconds) {
  if (sequences <= 0 || seconds <= 0) return;
  const size_t c = ClassOf(sequences);
  if (classes_.size() <= c) classes_.resize(c + 1);
  Throughput& t = classes_[c].by_kind[drafted ? 1 : 0];
  t.tokens = kDecay * t.tokens + tokens;
  t.seconds = kDecay * t.seconds + seconds;
  ++t.samples;
}

const DraftingGuard::Throughput* DraftingGuard::Find(int64_t sequences, bool drafted) const {
  const size_t c = ClassOf(sequences);
  if (c >= classes_.size()) return nullptr;
  const Throughput& t = classes_[c].by_kind[drafted ? 1 : 0];
  return t.samples >= kMinSamples ? &t : nullptr;
}

double DraftingGuard::Rate(int64_t sequences, bool drafted) const {
  const Throughput* t = Find(sequences, drafted);
  return t ? t->tokens / t->seconds : 0.0;
}

bool DraftingGuard::AllowDrafting(int64_t sequences) {
  const Throughput* drafting = Find(sequences, true);
  if (!drafting) return true;  // drafting not measured yet here: let it measure
  const Throughput* plain = Find(sequences, false);
  if (!plain) return false;  // measure plain steps to compare with
  if (drafting->tokens / drafting->seconds < plain->tokens / plain->seconds) return false;
  int64_t& allowed = classes_[ClassOf(sequences)].allowed_since_plain;
  if (++allowed < kPlainRefreshEvery) return true;
  allowed = 0;
  return false;
}

}  // namespace pdspark::serving
