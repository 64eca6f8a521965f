#include "engine/backend/cuda/graph_planner.h"

namespace pdspark::engine::backend {

void LaunchSignature::AddBytes(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash_ ^= p[i];
    hash_ *= 0x100000001b3ull;  // FNV-1a's prime
  }
}

std::vector<GraphPlanner::Piece> GraphPlanner::Plan(std::span<const uint64_t> launches) {
  if (launches_seen_.size() > options_.max_remembered) Forget();
  // Stable: seen at an earlier flush (a launch repeated within this one does not count).
  std::vector<bool> stable(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) stable[i] = launches_seen_.count(launches[i]) > 0;
  launches_seen_.insert(launches.begin(), launches.end());

  std::vector<Piece> pieces;
  std::unordered_set<uint64_t> capturing;  // a key twice in one flush is captured once
  auto run = [&](size_t begin, size_t end) {
    if (begin == end) return;
    if (!pieces.empty() && pieces.back().action == Action::kRun) {
      pieces.back().end = end;  // one piece for consecutive launches that run as recorded
    } else {
      pieces.push_back({begin, end, Action::kRun, 0});
    }
  };
  size_t i = 0;
  while (i < launches.size()) {
    size_t end = i;
    while (end < launches.size() && stable[end]) ++end;
    if (end - i >= options_.min_launches) {
      LaunchSignature key;
      for (size_t j = i; j < end; ++j) key.Add(launches[j]);
      key.Add(end - i);
      Action action = Candidate(key.value());
      if (action == Action::kCapture && !capturing.insert(key.value()).second) {
        action = Action::kRun;
      }
      if (action == Action::kRun) {
        run(i, end);
      } else {
        pieces.push_back({i, end, action, key.value()});
      }
    } else {
      run(i, end);
    }
    // The unstable launch after the run (if any) runs as recorded.
    const size_t next = end < launches.size() ? end + 1 : end;
    run(end, next);
    i = next;
  }
  return pieces;
}

GraphPlanner::Action GraphPlanner::Candidate(uint64_t key) {
  if (captured_.count(key)) return Action::kReplay;
  if (failed_.count(key)) return Action::kRun;
  const int64_t seen = pieces_seen_[key]++;
  if (seen >= 1 && captured_.size() < options_.max_graphs) return Action::kCapture;
  return Action::kRun;
}

void GraphPlanner::Captured(uint64_t key) { captured_.insert(key); }

void GraphPlanner::CaptureFailed(uint64_t key) { failed_.insert(key); }

void GraphPlanner::Forget() {
  launches_seen_.clear();
  pieces_seen_.clear();
}

}  // namespace pdspark::engine::backend
