#include "engine/dspark/verify_scheduler.h"

#include <algorithm>
#include <numeric>

namespace pdspark::dspark {

namespace {

struct Candidate {
  double survival;
  int64_t slot;
  size_t request;
};

}  // namespace

std::vector<int64_t> ChooseVerifyLengths(const std::vector<std::vector<double>>& survival,
                                         const StepBase& base, const TargetCost& cost,
                                         double min_survival) {
  std::vector<int64_t> lengths(survival.size(), 0);
  std::vector<Candidate> candidates;
  for (size_t r = 0; r < survival.size(); ++r) {
    for (size_t k = 0; k < survival[r].size(); ++k) {
      candidates.push_back({survival[r][k], static_cast<int64_t>(k), r});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.survival > b.survival || (a.survival == b.survival && a.slot < b.slot);
  });
  double tokens = base.tokens;
  int64_t rows = base.rows;
  double best = tokens / cost(base.sequences, rows);
  for (const Candidate& c : candidates) {
    if (c.survival < min_survival || rows + 1 > base.max_rows) break;
    const double theta = (tokens + c.survival) / cost(base.sequences, rows + 1);
    if (theta <= best) break;  // early stop: required for losslessness (see the header)
    best = theta;
    tokens += c.survival;
    ++rows;
    lengths[c.request] = c.slot + 1;
  }
  return lengths;
}

DraftPlan PlanDrafts(const std::vector<std::vector<double>>& predicted,
                     const std::vector<int64_t>& cap, int64_t max_slots, const StepBase& base,
                     const TargetCost& target, const DraftCost& draft, double min_survival,
                     double min_speedup, const std::vector<double>& setup) {
  DraftPlan plan;
  const size_t n = predicted.size();
  if (n == 0 || max_slots <= 0) return plan;
  const double plain = base.tokens / target(base.sequences, base.rows);
  double best = plain * min_speedup;
  auto setup_of = [&](size_t r) { return setup.empty() ? 0.0 : setup[r]; };
  std::vector<size_t> order(n);
  std::vector<double> gain(n);
  std::vector<std::vector<double>> chosen;
  for (int64_t g = 1; g <= max_slots; ++g) {
    for (size_t r = 0; r < n; ++r) {
      const int64_t m = std::min(g, cap[r]);
      gain[r] = std::accumulate(predicted[r].begin(), predicted[r].begin() + m, 0.0) -
                plain * setup_of(r);
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return gain[a] > gain[b]; });
    for (size_t k = 1;; k = std::min(2 * k, n)) {
      chosen.clear();
      for (size_t i = 0; i < k; ++i) {
        const size_t r = order[i];
        chosen.emplace_back(predicted[r].begin(), predicted[r].begin() + std::min(g, cap[r]));
      }
      const std::vector<int64_t> lengths = ChooseVerifyLengths(chosen, base, target, min_survival);
      double tokens = base.tokens, setup_seconds = 0;
      int64_t rows = base.rows;
      for (size_t i = 0; i < k; ++i) {
        setup_seconds += setup_of(order[i]);
        if (lengths[i] > 0)
          tokens += std::accumulate(chosen[i].begin(), chosen[i].begin() + lengths[i], 0.0);
        rows += lengths[i];
      }
      const double theta = tokens / (setup_seconds + draft(static_cast<int64_t>(k), g) +
                                     target(base.sequences, rows));
      if (theta > best) {
        best = theta;
        plan.gamma = g;
        plan.requests.assign(order.begin(), order.begin() + k);
      }
      if (k == n) break;
    }
  }
  if (plan.gamma > 0) plan.predicted_speedup = best / plain;
  return plan;
}

}  // namespace pdspark::dspark
