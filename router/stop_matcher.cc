#include "router/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace pdspark::router {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  // Earliest match wins; pending_ never holds a complete stop string from an earlier call, so a
  // full search is correct and short (pending_ is at most the longest stop string plus `text`).
  size_t best = std::string::npos;
  for (const std::string& stop : stops_) {
    size_t pos = pending_.find(stop);
    if (pos < best) {
      best = pos;
      matched_ = stop;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, include_stop_ ? best + matched_.size() : best);
    pending_.clear();
    return out;
  }
  size_t keep = HeldBackLength();
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  if (stopped_) return "";
  return std::exchange(pending_, std::string());
}

size_t StopMatcher::HeldBackLength() const {
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  return keep;
}

}  // namespace pdspark::router
